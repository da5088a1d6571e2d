"""The judge a worker calls, injected so the worker does not care which one it is.

`SandboxJudge` (the default, and the only one for real use) wraps `sandbox.prepare` and `sandbox.execute`.
Candidate code never runs in the worker's process: each candidate runs in its own isolated child, so the
worker may call them from threads. Between `open` and `close` the judge keeps pre-started children per
device (`sandbox.execution.warm.WarmPool`, `Settings.warm_spares` and `warm_standby`) and hands each
candidate one of them, so that a child's start-up is paid ahead of need, off the device's clock; each child
still serves one candidate.
`CompileOnlyJudge` is for load tests of the service itself: it runs the real `prepare` (extraction, static
checks, cached compile) but *does not run the candidate*; its verdicts say so and carry no timings, so they
are never ranked.
"""

from __future__ import annotations

import traceback
from dataclasses import dataclass, field, replace
from typing import Protocol

import sandbox
from sandbox import JudgeConfig, PreparedCandidate, Status, Verdict
from sandbox.profiling.report import Profile
from sandbox.profiling.run import profile_candidate, time_limit_s
from sandbox.execution.warm import WarmPool
from service.core.config import JudgeMode, Settings


class Judge(Protocol):
    mode: str

    def prepare(self, task_id: str, source: str, *, target: str) -> PreparedCandidate | Verdict: ...

    def execute(self, prepared: PreparedCandidate, device: str) -> Verdict: ...

    def profile(self, prepared: PreparedCandidate, device: str, verdict: Verdict | None = None) -> Profile:
        """After the verdict, when its submitter asked: the candidate's kernels under Nsight Compute, in a child
        of their own (sandbox.profiling.run); on a CPU device "not available on this host"."""

    def open(self, devices: list[str]) -> None:
        """Before the first job: set up what executing on these devices needs (the pre-started children)."""

    def close(self) -> None:
        """At shutdown: release it (kill the pre-started children)."""


def judge_config(settings: Settings) -> JudgeConfig:
    config = JudgeConfig()
    if settings.timing_budget_ms is not None:
        config = replace(config, timing_budget_ms=settings.timing_budget_ms)
    if settings.trials_per_distribution is not None:
        config = replace(config, trials_per_distribution=settings.trials_per_distribution)
    if settings.compile_timeout_s is not None:
        config = replace(config, compile_timeout_s=settings.compile_timeout_s)
    if settings.run_timeout_s is not None:
        config = replace(config, run_timeout_s=settings.run_timeout_s)
    return config


GPU_SPARES = 3
"""Ready spares per GPU by default: a ready spare holds a device context, and a short candidate (~0.5 s) takes one
at once. Three, as the fleet runs measured them (docs/results/fleet-h100x2-2026-11-26.md: 6 did worse); what they
lacked was supply behind them, every replacement a whole start (~3.5 s of CPU), which the standby stock
(`GPU_STANDBY`) turns into a set-up (~0.5 s)."""
GPU_STANDBY = 4
"""Standby children per GPU by default (Settings.warm_standby): with the 3 ready, 7 candidates of a run of short
ones (a rejected one holds the GPU ~0.5 s) are served while the spawners refill standby (~3.5 s a start, 7 per GPU
side by side within the host's start slots, JudgeConfig.spare_start_slots); each costs host memory only."""


@dataclass
class SandboxJudge:
    config: JudgeConfig
    mode: str = JudgeMode.SANDBOX.value
    spares: int | None = None
    """Pre-started children per device; 0: a child is started for each candidate; None: `GPU_SPARES` per GPU,
    none for the CPU (Settings.warm_spares)."""
    standby: int | None = None
    """Host-started children per device beside the ready ones; None: `GPU_STANDBY` per GPU, none for the CPU
    (Settings.warm_standby)."""
    pool: WarmPool | None = field(default=None, repr=False)

    def prepare(self, task_id: str, source: str, *, target: str) -> PreparedCandidate | Verdict:
        return sandbox.prepare(task_id, source, target=target, config=self.config)

    def execute(self, prepared: PreparedCandidate, device: str) -> Verdict:
        # A ready spare, or one started now for this task; None (no pool, or spares keep failing): cold start,
        # whose own failure then becomes the verdict (system_error, retried).
        child = self.pool.acquire(device, prepared.task_id) if self.pool is not None else None
        return sandbox.execute(prepared, device, config=self.config, child=child)

    def profile(self, prepared: PreparedCandidate, device: str, verdict: Verdict | None = None) -> Profile:
        """`verdict`: the candidate's, whose measured call time bounds the profile's (run.time_limit_s)."""
        return profile_candidate(prepared, device, config=self.config, time_limit_s=time_limit_s(verdict))

    def open(self, devices: list[str]) -> None:
        if self.pool is not None:
            return
        if self.spares is None:
            devices, spares = [d for d in devices if d.startswith("cuda")], GPU_SPARES
        else:
            spares = self.spares
        gpus_only = all(d.startswith("cuda") for d in devices)
        standby = self.standby if self.standby is not None else (GPU_STANDBY if gpus_only else 0)
        if spares > 0 and devices:
            self.pool = WarmPool(devices, self.config, spares=spares, standby=standby)

    def close(self) -> None:
        if self.pool is not None:
            self.pool.close()
            self.pool = None


@dataclass
class CompileOnlyJudge(SandboxJudge):
    mode: str = JudgeMode.COMPILE_ONLY.value

    def open(self, devices: list[str]) -> None:
        """Nothing runs: no children to pre-start."""

    def execute(self, prepared: PreparedCandidate, device: str) -> Verdict:
        return Verdict(status=Status.CORRECT, task=prepared.task_id, device=device,
                       judged_sha256=prepared.code_sha256, toolchain=prepared.toolchain, stages=prepared.stages,
                       imports=prepared.imports, compile_log=prepared.compile_log,
                       diagnosis="compile-only judge (load testing): compiled, NOT run, NOT checked, NOT timed",
                       details={"judge_mode": self.mode, "executed": False})

    def profile(self, prepared: PreparedCandidate, device: str, verdict: Verdict | None = None) -> Profile:
        return Profile(status="unavailable", reason="not available: the compile-only judge runs no candidate",
                       device=device)


def make_judge(settings: Settings) -> Judge:
    config = judge_config(settings)
    if settings.mode is JudgeMode.COMPILE_ONLY:
        return CompileOnlyJudge(config)
    return SandboxJudge(config, spares=settings.warm_spares, standby=settings.warm_standby)


def system_error(task_id: str, device: str, text_sha256: str, stage: str, exc: BaseException) -> Verdict:
    """The judge itself raised: our failure, never the candidate's. Retried by the queue."""
    tail = "".join(traceback.format_exception(exc)[-6:])
    return Verdict(status=Status.SYSTEM_ERROR, task=task_id, device=device, judged_sha256=text_sha256,
                   diagnosis=f"the judge failed during {stage}: {type(exc).__name__}: {exc}",
                   details={"stage": stage, "traceback": tail[-4000:]})


def crash_loop_verdict(task_id: str, device: str, text_sha256: str, crashes: int) -> Verdict:
    """The final verdict of a job whose workers were lost `crashes` times while its candidate executed.

    A system_error, stored as final (claims.finish(final=True)): the retries end, since a candidate that
    kills its workers must not loop forever, but the verdict states only what the queue saw. A lease that
    expires while the candidate runs is the candidate's doing or the infrastructure's (an OOM kill, a host
    going down, an operator's kill, a database outage longer than the lease), and nothing here tells which;
    a runtime_error would blame the candidate for a cause nobody observed (RetryPolicy.crash_loop)."""
    return Verdict(status=Status.SYSTEM_ERROR, task=task_id, device=device, judged_sha256=text_sha256,
                   diagnosis=f"not judged: the worker judging this candidate was lost {crashes} times while the "
                             "candidate executed (its lease expired: a killed or crashed worker, or a database "
                             "outage longer than the lease); the cause is not known, so the candidate is not "
                             "blamed, and it is not retried again",
                   details={"stage": "worker", "worker_crashes": crashes, "final": True})
