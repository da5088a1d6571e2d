"""Profiles a worker takes (service/profiles): the one its submitter asked for, after the verdict, and those other
workers left pending, taken up when idle and sent through the compile pool and an executor like a job (a mixin of
service.worker.runner.Worker)."""

from __future__ import annotations

import logging
import time

from sandbox import PreparedCandidate, Verdict
from sandbox.profiling.report import Profile
from service.profiles import recovery as profile_recovery
from service.profiles import store as profile_store
from service.queue import claims as q

log = logging.getLogger("service.worker")

PROFILED = profile_recovery.PROFILED
PROFILE_RECOVERY_EVERY_S = 5.0
"""How often an idle worker looks for profiles other workers left pending: a query over pending profiles, which
are few; more often gains nothing against `profile_unclaimed_after_s`."""


class ProfileWork:
    """The profiles of a Worker."""

    def _profile(self, claim: q.Claim, prepared: PreparedCandidate, device: str, verdict: Verdict) -> None:
        """The profile its submitter asked for (service/profiles), on this device, after the verdict is stored:
        the device is still this executor's alone, no ranked time is being taken, and the profile's device time
        is counted as its own stage, not as judging (`device_busy`). A candidate that did not run (it failed
        before its first forward call) has no kernels to profile."""
        if self.stopping.is_set():  # shutting down: the profile stays pending (another worker takes it up)
            return
        try:
            with self.db.transaction() as session:
                if not profile_recovery.take(session, claim.submission_id, self.worker_id):
                    return
            if verdict.status in PROFILED:
                result = self.judge.profile(prepared, self.sandbox_devices[device], verdict)
            else:
                result = profile_recovery.not_run(verdict.status, device)
            self.stats.observe("profile", result.gpu_seconds)
            self._record_profile(claim.submission_id, result)
            log.info("job %s: profile %s (%.1f s on %s)", claim.job_id, result.status, result.gpu_seconds, device)
        except Exception:  # a bug of ours, or the database away: the verdict stands, the profile stays pending
            log.exception("job %s: profiling failed", claim.job_id)

    def _not_profiled(self, claim: q.Claim, verdict: Verdict) -> None:
        """A final verdict that ran no kernel to profile (a compile error, a policy breach at the static checks):
        a profile asked for says so rather than staying pending."""
        try:
            with self.db.transaction() as session:
                if profile_store.is_pending(session, claim.submission_id):
                    profile_store.record(session, claim.submission_id, profile_recovery.not_run(verdict.status),
                                         self.worker_id)
        except Exception:  # the verdict stands; the profile stays pending
            log.exception("job %s: recording that no profile was taken failed", claim.job_id)

    def _take_up_profile(self) -> None:
        """When idle: take one profile another worker left pending and send it through the compile pool and an
        executor like a job, so it waits for a device as jobs do and never beside a timed candidate."""
        if self.stopping.is_set() or time.monotonic() < self.next_profile_look:
            return
        self.next_profile_look = time.monotonic() + PROFILE_RECOVERY_EVERY_S
        try:
            with self.db.transaction() as session:
                orphan = profile_recovery.take_orphan(
                    session, self.worker_id, unclaimed_after_s=self.settings.profile_unclaimed_after_s)
        except Exception:  # the queue's work comes first; the next look tries again
            log.exception("looking for profiles left pending failed")
            return
        if orphan is None:
            return
        log.info("submission %s: taking up its pending profile", orphan.submission_id)
        with self.lock:
            self.compiling += 1
        self.to_compile.put(orphan)

    def _prepare_orphan(self, orphan: profile_recovery.Orphan) -> None:
        try:
            if self.stopping.is_set():
                self._give_back_profile(orphan)
                return
            result = self.judge.prepare(orphan.task_id, orphan.source, target=self.target)
            if isinstance(result, Verdict):  # it built when it was judged: the build environment changed since
                self._record_profile(orphan.submission_id, Profile(
                    status="failed", reason=f"not profiled: building it again gave {result.status.value}: "
                    f"{result.diagnosis[:300]}"))
            else:
                self.compiled.put((orphan, result))
        except Exception:  # a bug of ours: its lease runs out and the profile is taken up again (ATTEMPTS bound it)
            log.exception("submission %s: building for its profile failed", orphan.submission_id)
        finally:
            with self.lock:
                self.compiling -= 1
            self.wake.set()

    def _profile_orphan(self, orphan: profile_recovery.Orphan, prepared: PreparedCandidate, device: str) -> None:
        try:
            if self.stopping.is_set():
                self._give_back_profile(orphan)
                return
            result = self.judge.profile(prepared, self.sandbox_devices[device], orphan.verdict)
            self.stats.observe("profile", result.gpu_seconds)
            self._record_profile(orphan.submission_id, result)
            log.info("submission %s: profile %s (%.1f s on %s), taken up from another worker",
                     orphan.submission_id, result.status, result.gpu_seconds, device)
        except Exception:  # as in _prepare_orphan
            log.exception("submission %s: profiling failed", orphan.submission_id)
        finally:
            self.wake.set()

    def _give_back_profile(self, orphan: profile_recovery.Orphan) -> None:
        try:
            with self.db.transaction() as session:
                profile_recovery.give_back(session, orphan.submission_id, self.worker_id)
        except Exception:  # its lease runs out instead
            log.exception("submission %s: giving its profile back failed", orphan.submission_id)

    def _record_profile(self, submission_id: str, profile: Profile) -> None:
        with self.db.transaction() as session:
            profile_store.record(session, submission_id, profile, self.worker_id)
