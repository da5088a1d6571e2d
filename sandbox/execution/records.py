"""What a candidate's execution passes between its phases (sandbox/execution/phases.py, timed_phase.py, training.py)
and hands to a pre-started child's pool (warm.py): the stages, a timed batch's figures, the parent's truth for a call,
the calibration, and the exception that ends an execution with a verdict.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import torch

from sandbox.verdict import Status

if TYPE_CHECKING:
    pass


READY_TIMEOUT_S = 180.0
"""Starting the child: Python, torch and (on a GPU) a CUDA context; seconds on a loaded machine."""
class Stage(enum.StrEnum):
    """The stages a candidate's device time is counted in (`Verdict.stages` keys), in the order they run."""

    BASELINES = "baselines"
    START = "start"
    CALIBRATION = "calibration"
    LOAD = "load"
    CORRECTNESS = "correctness"
    TIMING = "timing"
    EXTRA_SHAPES = "extra_shapes"


STAGE_LABELS = {Stage.BASELINES: "baselines", Stage.START: "starting the sandbox", Stage.CALIBRATION: "calibration",
                Stage.LOAD: "import of the candidate", Stage.CORRECTNESS: "correctness", Stage.TIMING: "timing",
                Stage.EXTRA_SHAPES: "extra shapes"}
"""How a diagnosis names the stage a child failed in."""


class _Stop(Exception):
    """Ends execution early with a verdict."""

    def __init__(self, status: Status, diagnosis: str, **details: Any) -> None:
        super().__init__(diagnosis)
        self.status = status
        self.diagnosis = diagnosis
        self.details = details


@dataclass(frozen=True, kw_only=True)
class TimedCall:
    """One timed batch (one `go`), in per-call units: every figure is the batch's divided by its calls."""

    distribution: str
    """The first call's distribution (`distributions` has them all)."""
    claim_ms: float
    """What the child says a call took: the batch's mean."""
    window_ms: float
    """What the parent's clock saw: from sending `go` to reading the reply, per call."""
    run_ms: float
    """CPU time the sandbox ran in that window, by the kernel's accounting (waiting for a CPU excluded; threads and
    processes that exited within it included, sandbox/execution/cputime.py), per call."""
    hidden_work: bool
    calls: int = 1
    claims_ms: tuple[float, ...] = ()
    """Each call's own time, as the child measured it."""
    distributions: tuple[str, ...] = ()
    host_ms: float = 0.0
    """The child's host clock around the batch, per call (flushes and clock overhead removed)."""
    event_ms: float | None = None
    """The child's events, per call (None on the CPU): with `host_ms`, why a batch was or was not `hidden_work`."""
    arm_ms: float = 0.0
    """What the parent's clock saw from sending `arm` to reading its reply, per call (buffers alone: no inputs)."""
    truth_ms: float = 0.0
    """The parent's own work before the batch (fp64 truth and fingerprints of the calls' inputs), per call."""
    made_ms: float = 0.0
    """The child's span before the batch's first call, per call (sandbox/child/timing.py `BatchTime.made_ms`)."""
    judge_ms: float = 0.0
    """GPU: the device time the parent's own making of the calls' inputs took, per call (sandbox/execution/making.py):
    what the child's span before each call holds besides its flushes."""
    flushes_ms: float = 0.0
    """GPU: the batch's own flushes (its lead and the one before its first call) at the rate the calibration measured,
    per call: what the span's allowance for the flushes' drift is a share of
    (plausibility.UNATTRIBUTED_FLUSH_FRACTION)."""
    excess_ms: float = 0.0
    """GPU: the child's span before the batch's first call beyond the judge's own work in it (the lead's flushes, the
    making of every call's inputs, a flush) and beyond what an empty batch's span held so (`empty_span_excess_ms`), per
    call: device time the judge did not ask for."""
    gap_ms: float = 0.0
    """GPU: the device from a call's end to the next call's start beyond the flush there, per gap (the host behind, or
    work deferred past a call: the host clock's rule and the window bound it)."""
    ranked_ms: float = 0.0
    """What the batch ranks, per call: the claim plus what the parent charges it (plausibility.ranked_claim)."""
    unexplained_ms: float = 0.0
    """GPU: the parent's wall window beyond every device span the child reports (the span before the calls, the calls'
    events, the gaps between them), per call: the host's own share of a round trip (plausibility.unexplained_wall)."""
    own_makes_ms: tuple[float, ...] = ()
    """CPU: the parent thread's CPU time making each call's inputs, just before the batch (sandbox/execution/making.py):
    the judge's own work inside `run_ms`, as costly as the host's load made it then."""
    cpu_source: str = ""
    """Where `run_ms` came from (sandbox/execution/cputime.py: a cgroup, or the processes' clocks)."""
    settled: bool = True
    """Whether both CPU-time readings found every thread of the sandbox off the CPU (cputime.SETTLE_S)."""

    def call_run_ms(self, making_caps: Mapping[str, float]) -> float:
        """`run_ms` less the judge's own making of the inputs in it, each call's making at most its distribution's cap
        (plausibility.making_caps): what the CPU-time bound compares."""
        own = sum(min(ms, making_caps.get(d, ms)) for d, ms in zip(self.distributions, self.own_makes_ms))
        return self.run_ms - own / self.calls


@dataclass(frozen=True, kw_only=True)
class TimingDetails:
    """How a candidate's timing went, beside its figures (`Verdict.details["timing"]`, these keys in this order):
    what the parent saw around every timed batch, and the inputs of the plausibility bounds."""

    scheme: str = "fresh seed per call, batches of calls back to back, a batch's mean is its claim"
    batch_size: int
    timed_batches: int
    warmup_batches: int
    timed_calls: int
    warmup_calls: int
    planned_calls: int
    distributions: dict[str, int]
    """Calls per distribution, warm-up included."""
    truth_checks: int
    window_median_ms: float
    run_median_ms: float
    empty_call_run_ms: float
    empty_call_window_ms: float
    call_floor_ms: float
    cpu_time_source: str
    cpu_readings_unsettled: int
    arm_windows_ms: list[float]
    truth_ms: list[float]
    empty_arm_window_ms: float
    made_ms: list[float]
    """Per timed batch, per call: the child's span before the batch's first call (GPU: device time from the lead to
    the first start event; CPU: the host clock around the making of the inputs)."""
    judge_ms: list[float]
    """Per timed batch, per call: the parent's own making of the same inputs (GPU: its device time, the least of its
    measurements; CPU: its thread's CPU time)."""
    unattributed_ms: list[float]
    """GPU, per timed batch, per call: device time before the calls beyond the judge's own work (charged)."""
    gaps_ms: list[float]
    """GPU, per timed batch: the device between a call's end and the next one's start beyond its flush, per gap."""
    ranked_ms: list[float]
    """Per timed batch, per call: what ranks (the claim and its charge: plausibility.ranked_claim)."""
    unexplained_ms: list[float]
    """GPU, per timed batch, per call: the parent's wall window beyond the device spans the child reports."""
    empty_unexplained_ms: float
    lead_ms: float
    flush_ms: float
    speed_of_light_limit: float
    claims_ms: list[float]
    batch_claims_ms: list[float]
    windows_ms: list[float]
    runs_ms: list[float]
    hidden_work: bool
    hidden_work_batches: list[int]
    host_over_events: list[float | None]
    clocks: dict[str, Any] = field(default_factory=dict)
    """The card's clocks around the timing (NVML, read here: sandbox/profiling/clocks.py): `check` (throttled true,
    false or null for unknown, its reasons and a line), `retimed` (the first timing was throttled and was run again)
    and `first` (that first timing's check)."""


@dataclass(frozen=True, kw_only=True)
class CallTruth:
    """What the parent knows of one timed call before it runs: the fp64 output and the inputs' fingerprints;
    `gradient`, for a training step (sandbox/execution/training.py, GradientTruth)."""

    output: torch.Tensor
    prints: list[str]
    gradient: Any = None
    make_ms: float | None = None
    """The device time the parent's own making of these inputs took (sandbox/execution/making.py); None on the CPU."""


@dataclass(frozen=True, kw_only=True)
class Calibration:
    """What the child measured before any candidate existed (`Execution.calibrate`), adopted from a pre-started
    child where one ran it (sandbox/execution/warm.py)."""

    empty_calls: tuple[TimedCall, ...]
    flush_ms: float
    """A GPU flush's device time (the lead's unit, and the flush before each call)."""
    lead_ms: float
    """The least lead before a batch; with `make_host_ms` it sizes each batch's (timing.lead_flushes)."""
    make_host_ms: float
    """The host's time to queue the making of one timed call's inputs (what sized the lead)."""


