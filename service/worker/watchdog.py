"""The worker's watchdog: a job held in one phase far longer than that phase's own limit allows means the worker
is stuck, and a stuck worker must be seen and must give its jobs back.

Seen on a 16-core H100 host (issue 24): 32 submissions at once, 8 claimed, every compile thread stuck in a fork
deadlock, no verdict for 8 minutes, and /readyz answering 200 the whole time, while the heartbeat thread kept
the 8 leases alive. Every `check_s` the watchdog compares each held job's time in its current phase with that
phase's limit (`StallLimits`, derived from the judge's own time limits). A job past it is *stalled*; for the
jobs newly found so in a round:

1. every thread's stack goes to the log (faulthandler, all threads), so the stuck frame can be read;
2. each stalled job goes back to the queue recorded as `AttemptOutcome.STALLED` (never a crash: the candidate is
   not blamed, whatever phase it stalled in) and leaves the worker's `held` map, so no heartbeat renews it;
   another worker, or this one once restarted, takes it;
3. the stall is written to the worker's row at once (`stats.stalled`: the stalled jobs whose threads have not
   come back; `stats.stalls`: a count per phase): /readyz of the process that runs or started the worker answers
   503 while `stalled` is not empty (service.worker.registry.local_stalls), and /metrics exports
   judge_worker_stalled_jobs and judge_stalls_total (service.observability.metrics).

A stage that comes back in time but whose limit ran while the host stopped or starved its child (`host_stall`,
sandbox/build/stall.py) is counted with its phase's stalls too; its job is retried as a system_error.

A stall lasts until the thread stuck in it comes back (`returned`; what it brings is discarded, the job being no
longer ours). A thread stuck for good keeps the worker not ready until the worker is restarted; meanwhile its
slot stays taken (a stuck compile thread still counts as compiling; a stuck executor is subtracted from the
devices, `stalled_executors`), so the worker claims only what it can still work on.
"""

from __future__ import annotations

import faulthandler
import logging
import math
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from sandbox import JudgeConfig
from service.observability.logs import job_context
from service.queue.claims import Claim
from service.queue.states import HeldPhase

log = logging.getLogger("service.worker.watchdog")

CHECKS_PER_LIMIT = 20
"""Checks within the shortest limit: a stall is seen at most 5% of that limit late."""
MAX_CHECK_S = 5.0
"""A check is a pass over the held jobs in memory; every 5 s at most keeps a stall's detection prompt."""


@dataclass(frozen=True)
class StallLimits:
    """Seconds a job may stay in each phase before it counts as stalled."""

    compiling_s: float
    """`compile_timeout_s` + margin. sandbox.prepare builds in one child whose wall limit is the compile timeout
    (+30 s, sandbox/pipeline.py) and gives a `timeout` verdict past it; a job whose identical source another job
    is building waits on that build's lock, then finds it built (its own wait is that one build). The margin also
    covers a precompiled header built on first need (~40 s on 2 cores, ~20 s on the H100 host); that build has
    its own, longer limit (sandbox/build/accel.py BUILD_TIMEOUT_S), and on a badly oversubscribed host (2 cores,
    load 12-16: ~9.5 min) it outlasts the margin: every job waiting on it then counts as stalled and is released,
    a false alarm that costs a re-claim once the header is built. Also the limit for `claimed`: a job is claimed
    only for a free compile thread, so it waits at most for one to pick it up."""
    compiled_s: float
    """ceil((compile_slots + devices - 1) / devices) x the running limit: a worker holds at most compile_slots +
    devices jobs, so at most that many executions, each under the running limit, come before a compiled job on
    the device that takes it. While every executor is itself stalled, compiled jobs cannot move: stalled at once."""
    executing_s: float
    """`run_timeout_s` + margin: sandbox.execute's child is killed at its wall limit (`run_timeout_s`) and the
    verdict is a timeout; the margin covers the hand-over of a pre-started child and baselines measured on a
    device model's first candidate (eager and torch.compile of the reference, cached afterwards)."""
    recording_s: float
    """The worker's retries of a verdict's write while the database is away (1 + 2 + ... s, runner.FINISH_RETRIES)
    + margin."""

    @classmethod
    def derive(cls, config: JudgeConfig, *, margin_s: float, compile_slots: int, devices: int,
               record_retries_s: float) -> StallLimits:
        executing = config.run_timeout_s + margin_s
        ahead = math.ceil((compile_slots + devices - 1) / max(1, devices))
        return cls(compiling_s=config.compile_timeout_s + margin_s, compiled_s=max(1, ahead) * executing,
                   executing_s=executing, recording_s=record_retries_s + margin_s)

    def limit(self, phase: HeldPhase) -> float:
        return {HeldPhase.CLAIMED: self.compiling_s, HeldPhase.COMPILING: self.compiling_s,
                HeldPhase.COMPILED: self.compiled_s, HeldPhase.EXECUTING: self.executing_s,
                HeldPhase.RECORDING: self.recording_s}[phase]

    def check_s(self) -> float:
        shortest = min(self.compiling_s, self.compiled_s, self.executing_s, self.recording_s)
        return max(0.05, min(MAX_CHECK_S, shortest / CHECKS_PER_LIMIT))


@dataclass(frozen=True)
class HeldJob:
    """A held job as the watchdog reads it: the claim, its phase and since when (time.monotonic)."""

    claim: Claim
    phase: HeldPhase
    since: float


@dataclass(frozen=True)
class Stall:
    claim: Claim
    phase: HeldPhase
    held_s: float
    limit_s: float
    since_utc: str

    def describe(self) -> dict[str, object]:
        c = self.claim
        return {"job_id": c.job_id, "submission_id": c.submission_id, "task_id": c.task_id,
                "phase": self.phase.value, "held_s": round(self.held_s, 1), "limit_s": round(self.limit_s, 1),
                "stalled_at": self.since_utc}


class Holder(Protocol):
    """What the watchdog needs of its worker (service.worker.runner.Worker)."""

    def held_jobs(self) -> list[HeldJob]: ...

    def give_up(self, claim: Claim) -> None:
        """Release the job as stalled and stop heartbeating it."""

    def publish(self) -> None:
        """Write the worker's row now (current jobs and stats, the stalls included)."""


def thread_dump() -> str:
    """Every thread's stack, as faulthandler writes it (it needs a real file descriptor, hence the file)."""
    with tempfile.TemporaryFile("w+") as out:
        faulthandler.dump_traceback(file=out, all_threads=True)
        out.flush()
        out.seek(0)
        return out.read()


class Watchdog:
    def __init__(self, limits: StallLimits, *, devices: int, clock: Callable[[], float] = time.monotonic) -> None:
        self.limits = limits
        self.devices = devices
        self.clock = clock
        self._lock = threading.Lock()
        self._stalled: dict[str, Stall] = {}
        """Stalls whose stuck thread has not come back, by claim token."""
        self._counts: dict[str, int] = {}

    def watch(self, holder: Holder, stop: threading.Event) -> None:
        """The watchdog thread: check every `check_s` until `stop` is set."""
        while not stop.wait(self.limits.check_s()):
            try:
                self.check(holder)
            except Exception:  # noqa: BLE001 - the watchdog must outlive a failed round (the database away)
                log.exception("watchdog: a check failed")

    def check(self, holder: Holder) -> list[Stall]:
        """One round: find new stalls; dump the threads, give the jobs up and publish the row if any."""
        found = self._find(holder.held_jobs())
        if not found:
            return found
        log.error("watchdog: %d held job(s) made no progress for longer than their phase allows (%s); every "
                  "thread's stack follows, then the jobs go back to the queue unblamed\n%s", len(found),
                  ", ".join(f"job {s.claim.job_id} {s.phase.value} {s.held_s:.0f} s > {s.limit_s:.0f} s"
                            for s in found), thread_dump())
        for stall in found:
            with job_context(job_id=stall.claim.job_id, submission_id=stall.claim.submission_id):
                holder.give_up(stall.claim)
        holder.publish()
        return found

    def _find(self, held: list[HeldJob]) -> list[Stall]:
        now, stamp = self.clock(), time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        blocked = self.stalled_executors() >= self.devices  # no executor left to take compiled jobs
        found = []
        with self._lock:
            for job in held:
                limit = 0.0 if blocked and job.phase is HeldPhase.COMPILED else self.limits.limit(job.phase)
                if job.claim.token not in self._stalled and now - job.since > limit:
                    stall = Stall(job.claim, job.phase, now - job.since, limit, stamp)
                    self._stalled[job.claim.token] = stall
                    self._counts[job.phase.value] = self._counts.get(job.phase.value, 0) + 1
                    found.append(stall)
        return found

    def host_stall(self, phase: HeldPhase, job_id: str, seen: dict[str, float]) -> None:
        """A stage that ended in the host's stall (sandbox/build/stall.py: its child stopped or starved while its
        limit ran) rather than in the candidate's verdict: counted with the stalls of its phase, so /metrics'
        judge_stalls_total shows a host that stops or starves its builds; the job itself is retried as a
        system_error, never given the candidate's timeout."""
        with self._lock:
            self._counts[phase.value] = self._counts.get(phase.value, 0) + 1
        log.error("watchdog: job %s's %s stage ran out of time while the host stopped or starved it (%s); it is "
                  "judged again", job_id, phase.value, ", ".join(f"{k} {v}" for k, v in seen.items()))

    def returned(self, token: str) -> None:
        """The thread that held this claim came back: its stall, if it was one, is over."""
        with self._lock:
            stall = self._stalled.pop(token, None)
        if stall is not None:
            log.warning("watchdog: job %s's %s stage came back after its stall; its result is discarded",
                        stall.claim.job_id, stall.phase.value)

    def stalled_executors(self) -> int:
        """Device executors stuck in a stalled execution (their device takes no job until they come back)."""
        with self._lock:
            return sum(s.phase is HeldPhase.EXECUTING for s in self._stalled.values())

    def snapshot(self) -> dict[str, Any]:
        """The part of the worker's row `stats` that readiness and /metrics read."""
        with self._lock:
            return {"stalled": [s.describe() for s in self._stalled.values()], "stalls": dict(self._counts)}
