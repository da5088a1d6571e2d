"""The worker: a claim loop feeding a compile pool, feeding one executor per device (role all, the default), or a
builder that only builds, or a run worker that runs what builders built (service/worker/roles.py).

    claim loop ──> compile threads (sandbox.prepare, CPU, N at once) ──> compiled queue
                                                                           │
                       one executor thread per device (sandbox.execute) <──┘ ──> finish (verdict)
    heartbeat thread: extends the leases of the jobs this worker is still working on (the `held` map, which
    every stage leaves when it ends, however it ends), notices jobs taken away, refreshes the `workers` row.
    watchdog thread (service.worker.watchdog): a job held in one phase far longer than that phase's limit allows
    is a stuck worker: every thread's stack is logged, the job goes back to the queue unblamed and leaves `held`,
    and the worker's row says it is stalled (readiness and metrics read that).

The loop claims only what the pool can start now plus one compiled job waiting per device, so the
device never waits while compiled work exists, and a worker never hoards jobs another could run.
Candidate code never runs here: every sandbox call starts its own isolated child process.

A builder's compile threads publish the build instead of queueing it for a device (service/worker/handoff.py);
a run worker's compile threads first load the job's artifact, when it has one and it passes the checks, so that
`prepare` finds the build stored (else it builds, as a worker of role all does).

Signals, heartbeats and shutdown: service/worker/lifecycle.py; profiles: service/worker/profiling.py.
Started by `serve` (JUDGE_PARENT_PID), the worker also stops when that parent dies (service.worker.lifeline).

A stage transition (compiling -> compiled -> running) that fails on a database error is retried; if the
database stays away the job is let go (released, or left to its lease) and no longer heartbeaten, so it
is never stuck in a stage while this worker lives.

Fault injection (drills only): JUDGE_FAULT_PAUSE_AT=<HeldPhase value> makes the worker stop dead when a
job reaches that phase, so a drill can SIGKILL it there; read in `_fault_point` and nowhere else.
"""

from __future__ import annotations

import logging
import os
import queue
import socket
import threading
import time
from dataclasses import dataclass, field

from reference import TaskId
from sandbox import PreparedCandidate, Verdict
from sandbox.needs import Capabilities, host_capabilities
from service.core.config import Settings
from service.db.models import utcnow
from service.db.session import Database
from service.observability.logs import job_context
from service.observability.stats import WorkerStats
from service.profiles import recovery as profile_recovery
from service.queue import claims as q
from service.queue import lengths, wakeup
from service.queue.states import AttemptOutcome, HeldPhase, JobState, Outcome
from service.worker import handoff, headers, holds, lifeline, registry, warmup
from service.worker.judging import Judge, crash_loop_verdict, judge_config, system_error
from service.worker.lifecycle import Lifecycle
from service.worker.profiling import PROFILED, ProfileWork
from service.worker.roles import Role, StageChooser
from service.worker.watchdog import HeldJob, StallLimits, Watchdog

log = logging.getLogger("service.worker")

FINISH_RETRIES = 6
"""Attempts to record a verdict while the database is unreachable (1, 2, 4, ... s apart); after that the
job is let go and reclaimed by the next worker once its lease expires."""
FINISH_RETRIES_S = float(sum(2 ** attempt for attempt in range(FINISH_RETRIES)))
"""The longest those attempts wait, in all (the watchdog's recording limit starts from it)."""

TRANSITION_RETRIES = 4
"""Attempts to move a job to its next stage while the database is unreachable (0.5, 1, 2 s apart); then the
job is released (or, if even that fails, left to its lease: it is not counted as a crash)."""

FAULT_PAUSE_ENV = "JUDGE_FAULT_PAUSE_AT"

TASK_IDS = tuple(t.value for t in TaskId)

@dataclass
class _Held:
    claim: q.Claim
    phase: HeldPhase = HeldPhase.CLAIMED
    since: float = field(default_factory=time.monotonic)
    since_utc: str = field(default_factory=lambda: utcnow().isoformat())

    def describe(self) -> dict[str, object]:
        c = self.claim
        return {"job_id": c.job_id, "submission_id": c.submission_id, "task_id": c.task_id,
                "phase": self.phase.value, "since": self.since_utc}


class Worker(Lifecycle, ProfileWork):
    def __init__(self, db: Database, settings: Settings, judge: Judge, devices: list[str],
                 worker_id: str | None = None, role: Role = Role.ALL) -> None:
        self.db = db
        self.settings = settings
        self.judge = judge
        self.judge_config = getattr(judge, "config", None) or judge_config(settings)
        self.devices = devices
        self.role = role
        self.stages = StageChooser(role, db, settings.lease_s)
        """Which stage each claim round takes (service/worker/roles.py)."""
        # "cpu:0,cpu:1" are CPU devices too (virtual devices: two executors on one CPU, for tests and benches).
        self.target = settings.build_target or (
            "cpu" if all(d.partition(":")[0] == "cpu" for d in devices) else "cuda")
        """What it builds for: its devices' kind, or JUDGE_BUILD_TARGET (a builder on a CPU node building for GPUs)."""
        self.lanes = {d: holds.lane(d) for d in devices}
        """Each device as the device-busy timeline names it (service.worker.holds)."""
        self.sandbox_devices = {d: holds.sandbox_device(d) for d in devices}
        """Each device as the sandbox is given it: a virtual CPU device `cpu:N` is the CPU."""
        self.capabilities = (Capabilities.parse(settings.worker_judges) if settings.worker_judges is not None
                             else host_capabilities(gpu=self.target == "cuda"))
        """What it claims (service/queue/capability.py): only jobs whose needs these cover."""
        self.worker_id = worker_id or f"{socket.gethostname()}:{os.getpid()}"
        self.policy = q.RetryPolicy(settings.max_attempts, settings.retry_backoff_s, settings.max_worker_crashes)
        self.compile_slots = max(1, settings.compile_workers)
        self.held: dict[str, _Held] = {}
        self.lock = threading.Lock()
        self.claiming = threading.Lock()
        """Held from reading the capacity to the end of the claim, and by `give_up` around its release: a stall
        found meanwhile cannot hand this worker back the job it just gave up on a capacity read before it."""
        self.to_compile: queue.Queue[q.Claim | profile_recovery.Orphan] = queue.Queue()
        self.compiled: queue.Queue[tuple[q.Claim | profile_recovery.Orphan, PreparedCandidate]] = queue.Queue()
        """Both carry claimed jobs, and profiles taken up from other workers (`_take_up_profile`)."""
        self.next_profile_look = 0.0
        self.compiling = 0
        self.stopping = threading.Event()
        self.stopped = threading.Event()
        """Set once shutdown is complete: the heartbeat thread ends with it."""
        self.wake = threading.Event()
        self.judged = 0
        self.stats = WorkerStats()
        self.parent = lifeline.expected_parent()
        self.fault_pause_at = os.environ.get(FAULT_PAUSE_ENV) or None
        limits = StallLimits.derive(judge_config(settings), margin_s=settings.stall_margin_s,
                                    compile_slots=self.compile_slots, devices=len(devices),
                                    record_retries_s=FINISH_RETRIES_S)
        self.watchdog = Watchdog(limits, devices=len(devices))
        self.lengths = lengths.DeviceSeconds(list(devices))
        """Expected device seconds per task, measured and default, and the tasks each device has run."""
        self.headers = headers.HeaderBuild(settings.warm_flag_sets(), on_change=self.publish)
        """The shared precompiled headers, built in the background from `run` on (service/worker/headers.py)."""

    # --- the loop ----------------------------------------------------------------------------------

    def run(self, *, max_jobs: int | None = None) -> None:
        """Claim and judge until stopped (signal, `stop()`, or after `max_jobs` verdicts, or builds published)."""
        listener = self._open()
        db_down = False
        while not self.stopping.is_set():
            if max_jobs is not None and self.judged >= max_jobs:
                break
            if lifeline.orphaned(self.parent):
                log.warning("parent process %s is gone: stopping", self.parent)
                break
            claimed, want, db_down = self._claim_round(db_down)
            for c in claimed:
                self._start(c)
            if not claimed and want and not db_down and self.role is not Role.BUILD:
                self._take_up_profile()
            if not claimed:
                log.debug("idle: next claim on a wake-up or in %.1f s", self.settings.poll_s)
            self.wake.wait(self.settings.poll_s if not claimed or not want else 0.05)
            self.wake.clear()
        self._shutdown()
        listener.close()  # after the shutdown: a second signal during its join must not cut the clean stop short

    def _open(self) -> wakeup.Listener:
        """Register, start what judging needs and the worker's threads; returns the wake-up listener."""
        log.info("worker %s: role=%s judge=%s devices=%s target=%s judges=%s compile_workers=%d lease=%.0fs",
                 self.worker_id, self.role.value, self.judge.mode, ",".join(self.devices), self.target,
                 ",".join(self.capabilities.words()), self.compile_slots, self.settings.lease_s)
        if self.parent is not None:
            lifeline.die_with_parent()  # SIGTERM when `serve` dies: the handler stops us gracefully
        builder = self.role is Role.BUILD
        try:  # a builder judges nothing itself: no devices, no `judges` (the fleet's judging is its run workers')
            registry.register(self.db, self.worker_id, [] if builder else self.devices, self.judge.mode,
                              None if builder else self.capabilities.words(), role=self.role.value)
        except Exception:  # the row is for people and metrics; leases work without it
            log.exception("could not register in the workers table")
        if not builder:  # pre-started children begin now, before the first job is claimed (one per sandbox device)
            self.judge.open(list(dict.fromkeys(self.sandbox_devices.values())))
        self.headers.start(self.judge_config.cache_root, self.target)
        if not builder:
            warmup.start(self.judge_config, list(self.sandbox_devices.values()), self.settings.warm_baseline_tasks())
        # Woken when another process queues jobs (service/queue/wakeup.py); the poll below stays the safety net.
        listener = wakeup.Listener(self.db.url, self.worker_id, wakeup.QUEUED, lambda _payload: self.wake.set())
        threads = [threading.Thread(target=self._heartbeats, name="heartbeat", daemon=True),
                   threading.Thread(target=self.watchdog.watch, args=(self, self.stopped), name="watchdog",
                                    daemon=True)]
        if self.settings.build_cache_max_bytes is not None:
            threads.append(threading.Thread(target=self._maintenance, name="maintenance", daemon=True))
        threads += [threading.Thread(target=self._compile_loop, name=f"compile-{i}", daemon=True)
                    for i in range(self.compile_slots)]
        threads += [threading.Thread(target=self._execute_loop, args=(d,), name=f"execute-{d}", daemon=True)
                    for d in ([] if builder else self.devices)]
        for t in threads:
            t.start()
        return listener

    def _claim_round(self, db_down: bool) -> tuple[list[q.Claim], int, bool]:
        """One claim: (the jobs claimed, how many were wanted, whether the database is down)."""
        want = 0
        try:
            with self.claiming:
                want = self._capacity()
                claimed = self._claim(want) if want else []
            if db_down:
                log.warning("claim: the database answers again")
            return claimed, want, False
        except Exception as exc:  # the database is unreachable: keep the held jobs, try again
            if not db_down:  # one traceback per outage, not one per poll
                log.exception("claim failed")
            else:
                log.debug("claim failed again: %s", exc)
            return [], want, True

    def _claim(self, want: int) -> list[q.Claim]:
        """Claim up to `want` jobs, never one of those this worker still holds (after a database outage longer
        than the lease their leases have expired, but they are ours and still being judged); longest expected
        device time first within the first `claim_window` places of the fair order (service.queue.order)."""
        try:
            self.lengths.maybe_refresh(self.db)
        except Exception:  # the order falls back to the figures it has; claiming must not wait on them
            log.exception("could not read the measured device seconds")
        with self.lock:
            held = list(self.held)
            expected = {task: self.lengths.expected(task) for task in TASK_IDS}
        return q.claim(self.db, self.worker_id, want, self.settings.lease_s, held=held,
                       seconds=lambda task: expected.get(task, lengths.default_seconds(task)),
                       window=self.settings.claim_window if self.role is not Role.BUILD else 1,
                       capabilities=self.capabilities, stage=self.stages.claim_stage())

    def stop(self) -> None:
        self.stopping.set()
        self.wake.set()

    def _capacity(self) -> int:
        """Jobs to claim now: free compile slots, keeping at most one compiled job waiting per device that has a
        working executor (one stuck in a stalled execution takes nothing; with none left, nothing is claimed).
        A builder: its free compile slots. A run worker while builders are alive loads artifacts rather than
        building, so it takes one job per executor beyond those running and waiting: it does not hoard built jobs
        another run worker's device could start."""
        with self.lock:
            compiling = self.compiling + self.to_compile.qsize()  # a stuck compile thread still counts here
            waiting = self.compiled.qsize()
        if self.role is Role.BUILD:
            return max(0, self.compile_slots - compiling)
        executors = len(self.devices) - self.watchdog.stalled_executors()
        if executors <= 0:
            return 0
        slots = self.compile_slots
        if self.role is Role.RUN and self.stages.builders():
            slots = min(slots, executors)
        free = slots - compiling
        room = slots + executors - compiling - waiting
        return max(0, min(free, room))

    def _start(self, claim: q.Claim) -> None:
        with self.lock:
            self.held[claim.token] = _Held(claim)
        with job_context(job_id=claim.job_id, submission_id=claim.submission_id):
            log.info("job %s (%s): claimed%s", claim.job_id, claim.task_id,
                     f" after {claim.crashes} worker crash(es) while running it" if claim.crashes else "")
            self._fault_point(claim, HeldPhase.CLAIMED)
            if self.policy.crash_loop(claim.crashes):
                verdict = crash_loop_verdict(claim.task_id, self.devices[0], claim.text_sha256, claim.crashes)
                self._finish(claim, verdict, final=True)
                return
        with self.lock:
            self.compiling += 1
        self.to_compile.put(claim)

    def _phase(self, claim: q.Claim, phase: HeldPhase) -> float:
        """Mark the held job's phase; returns the seconds spent in the previous one."""
        with self.lock:
            held = self.held.get(claim.token)
            if held is None:
                return 0.0
            now = time.monotonic()
            spent, held.phase, held.since, held.since_utc = now - held.since, phase, now, utcnow().isoformat()
        self._fault_point(claim, phase)
        return spent

    def _fault_point(self, claim: q.Claim, phase: HeldPhase) -> None:
        """Fault injection for drills (JUDGE_FAULT_PAUSE_AT): stop dead here, holding the job, until killed."""
        if self.fault_pause_at == phase.value:
            log.warning("FAULT INJECTION: paused at %s with job %s", phase.value, claim.job_id)
            threading.Event().wait()

    # --- stages ------------------------------------------------------------------------------------

    def _compile_loop(self) -> None:
        while True:
            claim = self.to_compile.get()
            if isinstance(claim, profile_recovery.Orphan):
                self._prepare_orphan(claim)
                continue
            try:
                with job_context(job_id=claim.job_id, submission_id=claim.submission_id):
                    self._compile(claim)
            except Exception:  # a bug of ours: never keep heartbeating a job nobody works on
                log.exception("job %s: compile stage failed", claim.job_id)
                self._let_go(claim)
            finally:
                with self.lock:
                    self.compiling -= 1
                self.wake.set()

    def _compile(self, claim: q.Claim) -> None:
        if self.stopping.is_set():
            self._release(claim)
            return
        self._phase(claim, HeldPhase.COMPILING)
        started = time.monotonic()
        if claim.artifact_sha256 is not None:  # built by a builder: its artifact, if it passes, is the build
            handoff.accept(self, claim)
        try:
            result = self.judge.prepare(claim.task_id, claim.source, target=self.target)
        except Exception as exc:  # noqa: BLE001 - the judge's own failure: system_error, retried with backoff
            result = system_error(claim.task_id, self.target, claim.text_sha256, "prepare", exc)
        self.stats.observe("compile", time.monotonic() - started)  # compile errors included
        if isinstance(result, Verdict):
            if result.details.get("stall"):  # the host's, not the candidate's: retried (sandbox/build/stall.py)
                self.watchdog.host_stall(HeldPhase.COMPILING, claim.job_id, result.details["stall"])
            self._finish(claim, result)
            if result.details.get("stall"):
                self.publish()
            return
        if self.role is Role.BUILD:  # published even while stopping: the build is done, and handing it on is cheap
            if handoff.publish(self, claim, result):
                self.judged += 1
            return
        if self.stopping.is_set():
            self._release(claim)
            return
        if not self._advance(claim, JobState.COMPILED, build_key=result.build_key,
                             compile_cached=result.compile_cached):
            return
        self._phase(claim, HeldPhase.COMPILED)
        self.compiled.put((claim, result))

    def _execute_loop(self, device: str) -> None:
        while True:
            claim, prepared = self.compiled.get()
            if isinstance(claim, profile_recovery.Orphan):
                self._profile_orphan(claim, prepared, device)
                continue
            try:
                with job_context(job_id=claim.job_id, submission_id=claim.submission_id):
                    self._execute(claim, prepared, device)
            except Exception:  # a bug of ours: never keep heartbeating a job nobody works on
                log.exception("job %s: execute stage failed", claim.job_id)
                self._let_go(claim)
            finally:
                self.wake.set()

    def _execute(self, claim: q.Claim, prepared: PreparedCandidate, device: str) -> None:
        if self.stopping.is_set():
            self._release(claim)
            return
        if not self._advance(claim, JobState.RUNNING):
            return
        self.stats.observe("device_wait", self._phase(claim, HeldPhase.EXECUTING))
        holds.started(self.db, claim.token, self.lanes[device])
        started = time.monotonic()
        try:
            verdict = self.judge.execute(prepared, self.sandbox_devices[device])
        except Exception as exc:  # noqa: BLE001 - the judge's own failure: system_error, retried with backoff
            verdict = system_error(claim.task_id, device, claim.text_sha256, "execute", exc)
        busy = time.monotonic() - started
        holds.ended(self.db, claim.token)
        with self.lock:
            self.lengths.executed(device, claim.task_id,
                                  verdict.environment.device_name if verdict.environment else None)
        self.stats.observe("execute", busy)
        self.stats.device_busy(device, busy)
        if self._finish(claim, verdict) is Outcome.VERDICT:
            self._profile(claim, prepared, device, verdict)

    # --- outcomes ----------------------------------------------------------------------------------

    def _advance(self, claim: q.Claim, state: JobState, **values: object) -> bool:
        """Move the held job to `state`, retrying while the database is away. False: the job is no longer
        ours (taken away, or let go because the database stayed away); it has left `held` either way."""
        for attempt in range(TRANSITION_RETRIES):
            try:
                if q.advance(self.db, claim.token, state, **values):
                    return True
                self._forget(claim, f"taken away before it could become {state.value}")
                return False
            except Exception:
                log.exception("job %s: moving to %s failed (attempt %d)", claim.job_id, state.value, attempt + 1)
                if attempt + 1 < TRANSITION_RETRIES:
                    time.sleep(0.5 * 2 ** attempt)
        self._let_go(claim)
        return False

    def _let_go(self, claim: q.Claim) -> None:
        """Stop working on a job after a failure of ours: release it (once), and whatever happens stop
        heartbeating it, so its lease expires and another worker takes it without blaming the candidate."""
        self._release(claim)

    def _finish(self, claim: q.Claim, verdict: Verdict, *, final: bool = False) -> Outcome:
        self._phase(claim, HeldPhase.RECORDING)
        started = time.monotonic()
        outcome = Outcome.LOST
        for attempt in range(FINISH_RETRIES):
            try:
                outcome = q.finish(self.db, claim.token, verdict, self.worker_id, self.policy, final=final)
                break
            except Exception:
                log.exception("job %s: recording the verdict failed (attempt %d)", claim.job_id, attempt + 1)
                time.sleep(2 ** attempt)
        self._forget(claim, None)
        self.stats.observe("record", time.monotonic() - started)
        self.stats.outcome(outcome.value)
        if outcome is Outcome.VERDICT:
            self.judged += 1
        log.info("job %s: %s (%s)%s", claim.job_id, verdict.status.value, outcome.value,
                 "" if outcome is not Outcome.LOST else ": the job was reclaimed by another worker; result discarded",
                 extra={"verdict": verdict.status.value, "outcome": outcome.value})
        if outcome is Outcome.VERDICT and verdict.status not in PROFILED:
            self._not_profiled(claim, verdict)
        return outcome

    # --- profiles other workers left pending (service/profiles/recovery.py) ------------------------------------

    def _release(self, claim: q.Claim) -> None:
        try:
            q.release(self.db, claim.token)
            log.info("job %s: released to the queue", claim.job_id)
        except Exception:
            log.exception("job %s: release failed; its lease will expire", claim.job_id)
        self._forget(claim, None)

    def _forget(self, claim: q.Claim, why: str | None) -> None:
        """The thread working on the job is done with it (however it ended): it leaves `held`, and a stall of
        its claim, if the watchdog saw one, is over."""
        with self.lock:
            self.held.pop(claim.token, None)
        self.watchdog.returned(claim.token)
        if why:
            log.warning("job %s: %s", claim.job_id, why)

    def _release_all(self) -> None:
        with self.lock:
            held = [h.claim for h in self.held.values()]
        for claim in held:
            self._release(claim)

    # --- the watchdog's view (service.worker.watchdog.Holder) -------------------------------------------

    def held_jobs(self) -> list[HeldJob]:
        with self.lock:
            return [HeldJob(h.claim, h.phase, h.since) for h in self.held.values()]

    def give_up(self, claim: q.Claim) -> None:
        """A stalled job: back to the queue as `stalled` (no blame), out of `held` so no heartbeat renews it. Its
        stuck thread keeps the claim; when it comes back, `_forget` ends the stall."""
        try:
            with self.claiming:
                q.release(self.db, claim.token, AttemptOutcome.STALLED)
            log.error("job %s: released to the queue: its worker stalled", claim.job_id)
        except Exception:
            log.exception("job %s: release failed; its lease will expire", claim.job_id)
        with self.lock:
            self.held.pop(claim.token, None)
