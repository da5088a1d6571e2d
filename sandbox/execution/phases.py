"""Run one prepared candidate in an isolated child: correctness trials, then timing, as named phases.

`execute` reads top to bottom: start the child, calibrate its clocks, load the candidate, correctness,
timing, extra shapes. Each phase is a method of `Execution`, timed by the one `stage` context manager.
Until `candidate_loaded` is set, no candidate code has run, so a failure of the child is the judge's
(system_error, retried); from then on it is the candidate's.

Nothing is compiled while the device is held: the child loads only what the build stage built (an extension
it would have to build is a compile_error, sandbox/build/no_build.py), and the load has a limit of seconds
(JudgeConfig.load_timeout_s), not the build's minutes.

Timing (the heart of the integrity scheme, see docs/threat-model.md): every timed call gets inputs from
its own seed, drawn here with `secrets` and sent to the child only when its batch is armed, from a
distribution drawn at random for that call. A batch of such calls runs back to back (sandbox/execution/timing.py);
its claim is its calls' mean. The parent computes fp64 truth and input fingerprints for every seed while
the child generates the inputs (never while a batch is timed), checks every timed output, and bounds what
the child claims with what it can see itself: the wall time of the batch's round trip, and the CPU time
the kernel accounted to the sandbox during it (sandbox/execution/plausibility.py).
"""

from __future__ import annotations

import contextlib
import dataclasses
import enum
import secrets
import statistics
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import torch

from reference import Task
from reference.task import sharing_targets
from sandbox import isolation
from sandbox.execution import cputime
from sandbox.execution import plausibility
from sandbox.execution import tracing
from sandbox.execution.making import made_on_device
from sandbox.profiling import clocks
from sandbox import protocol as msg
from sandbox.compare import compare, dtype_name, fingerprint, tensor_from_bytes
from sandbox.config import JudgeConfig
from sandbox.environment import describe
from sandbox.supervisor import ChildFailure, ChildResult, ChildSession
from sandbox.stages import timed
from sandbox.execution.timing import batch_size, lead_flushes, plan_reps, summarize
from sandbox.verdict import Performance, Status, TimingStats, TrialResult

if TYPE_CHECKING:
    from sandbox.execution.warm import WarmChild

READY_TIMEOUT_S = 180.0
"""Starting the child: Python, torch and (on a GPU) a CUDA context; seconds on a loaded machine."""
CLOCK_CALIBRATION_REPS = 50
"""Empty calls the child times to learn its clocks' own overhead (synchronise + timestamp)."""
EMPTY_CALLS = 10
"""Timed round trips of an empty batch before the candidate is loaded: what a round trip costs the parent's
clock beyond the calls themselves (the timing bound subtracts it). On the CPU: a loaded host's round trips vary."""
GPU_EMPTY_CALLS = 4
"""The same on a GPU, where an empty batch's round trip varies by a few per cent (H200, 2026-11-28) but costs the
device what a real batch's making does (kl_div: its lead and three sets of inputs, ~35 ms): ten of them made a
spare's calibration 0.5 s, which the next candidate's timing stage waited for (the device gate), 0.5 s of its hold."""
WARMUP_BATCHES = 1
"""Batches run, checked, and not counted: first-call costs (lazy initialisation, caches, JIT)."""
MIN_BATCHES = 4
"""Batches counted before the timing may stop early."""
TIMING_PRECISION = 0.005
"""Stop once the bootstrap 95% interval of the median batch mean is within +-0.5% of it (or at max_reps calls):
repetitions cost fresh inputs and fp64 truth each, so they are spent where they buy precision. Measured on
an H100, 2026-11-23: batch means of an honest kernel spread ~0.1-0.3%, so 4-6 batches usually suffice."""
ESTIMATE_TIMEOUT_FACTOR = 4
"""The estimate makes 4 calls (1 warm-up + 3 timed) on one input set."""
MAKE_HISTORY = 24
"""The parent's measurements of its own making of a distribution's inputs that `made_reference` takes the least of."""
TRACE_END_TIMEOUT_S = 120.0
"""Stopping the profiler and writing the last segment: a timing phase's records, a few MiB of JSON."""

R = TypeVar("R", bound=msg.Reply)
T = TypeVar("T")


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
    """The child's span before the batch's first call, per call (sandbox/execution/timing.py `BatchTime.made_ms`)."""
    judge_ms: float = 0.0
    """GPU: the device time the parent's own making of the calls' inputs took, per call (sandbox/execution/making.py):
    what the child's span before each call holds besides its flushes."""
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
    own_run_ms: float = 0.0
    """CPU: the parent thread's CPU time making the same inputs, just before the batch, per call
    (sandbox/execution/making.py): the judge's own work inside `run_ms`, as costly as the host's load made it then."""
    cpu_source: str = ""
    """Where `run_ms` came from (sandbox/execution/cputime.py: a cgroup, or the processes' clocks)."""
    settled: bool = True
    """Whether both CPU-time readings found every thread of the sandbox off the CPU (cputime.SETTLE_S)."""

    @property
    def call_run_ms(self) -> float:
        """`run_ms` less the judge's own making of the inputs in it (`own_run_ms`): what the CPU-time bound compares."""
        return self.run_ms - self.own_run_ms


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


@dataclass
class Execution:
    """The state of one candidate's run and its phases, in the order `execute` calls them."""

    task: Task
    device: str
    config: JudgeConfig
    shape: tuple[int, ...]
    stages: dict[str, float]
    session: ChildSession | None = None
    candidate_loaded: bool = False
    """Set just before the candidate is imported: from then on a failure of the child is the candidate's."""
    trials: list[TrialResult] = field(default_factory=list)
    extras: list[TrialResult] = field(default_factory=list)
    custom_evidence: set[str] = field(default_factory=set)
    calibration: Calibration | None = None
    parent_cpu_s: dict[str, float] = field(default_factory=dict)
    truth_checks: int = 0
    peak_memory: int | None = None
    """Most device memory the candidate allocated beyond its inputs in one timed call (CUDA only)."""
    warm: WarmChild | None = None
    """A pre-started child (sandbox/execution/warm.py) to judge on instead of starting one; its device's gate keeps a
    spare's set-up out of this candidate's timed phases."""
    build_dir: Path | None = None
    """The build stage's directory for this candidate (PreparedCandidate.build_dir)."""
    source_path: Path | None = None
    """The judge-owned checked source (PreparedCandidate.source_path), bound read-only into a child started
    here: nothing the candidate wrote into its build directory can change the module imported."""
    meter: cputime.Meter | None = None
    """Reads the sandbox's CPU time around each timed batch; made for the child on its first batch."""
    current: Stage = Stage.START
    """The stage running (or the last one entered): what a failure of the child is reported against."""
    work_dir: Path | None = None
    trace_probe: str = ""
    """The child's kernel-trace recorder, probed before any candidate: "available", "unavailable: why", "" (off)."""
    trace_key: bytes | None = None
    """This candidate's canary key (sandbox/execution/tracing.py), when its trace records."""
    traced_batches: list[int] = field(default_factory=list)
    """How many calls each batch the child ran with the trace's marks ran (warm-up included), in order: two canaries
    a call (the trace's rules read the gaps inside a batch)."""
    warmup_calls: set[int] = field(default_factory=set)
    unranked_reason: str | None = None
    """Why a correct verdict is not ranked (its timing was throttled twice), or None."""
    makes_ms: dict[str, list[float]] = field(default_factory=dict)
    """The parent's own making of timed calls' inputs, per distribution, in device ms (sandbox/execution/making.py):
    what `made_reference` reads."""

    @property
    def traced_calls(self) -> int:
        return sum(self.traced_batches)

    @property
    def empty_calls(self) -> tuple[TimedCall, ...]:
        """The empty batches timed before the candidate existed (`calibrate`)."""
        return self.calibration.empty_calls if self.calibration is not None else ()

    @property
    def is_cuda(self) -> bool:
        return torch.device(self.device).type == "cuda"

    @contextlib.contextmanager
    def stage(self, stage: Stage) -> Iterator[None]:
        """The one way to time a phase: wall seconds in `stages`, the parent's CPU seconds beside them."""
        self.current = stage
        with self.warm.phase(stage.value, self.stages) if self.warm is not None else contextlib.nullcontext():
            with timed(self.stages, stage.value, self.parent_cpu_s):
                yield

    # --- talking to the child -------------------------------------------------------------------

    def ask(self, command: msg.Message, model: type[R], step: str, timeout_s: float) -> tuple[R, ChildResult]:
        assert self.session is not None
        return self.read(self.session.request(command.model_dump(), timeout_s), model, step)

    def read(self, reply: ChildResult, model: type[R], step: str) -> tuple[R, ChildResult]:
        """Validate a reply at the boundary, then apply what every reply must show."""
        if reply.header.get("op") != msg.op_of(model):
            raise _Stop(Status.TAMPER_DETECTED, f"{step}: the reply is not an answer to {msg.op_of(model)!r} (a forged "
                        "or corrupted message on the result channel)", rule="protocol")
        try:
            parsed = msg.parse_reply(reply.header, model)
        except msg.ProtocolError as exc:
            raise _Stop(Status.TAMPER_DETECTED, f"{step}: {exc} (a forged or corrupted message on the result "
                        "channel)", rule="protocol") from None
        self.check(parsed, step)
        return parsed, reply  # type: ignore[return-value]

    def check(self, reply: msg.Reply, step: str) -> None:
        """No forbidden call, no tampering, no stray threads or processes, no error."""
        if reply.tripwire_hits:
            raise _Stop(Status.POLICY_VIOLATION, f"called the forbidden operator {reply.tripwire_hits[0]} during "
                        f"{step}", rule="forbidden_operator", calls=reply.tripwire_hits)
        if reply.tampered:
            raise _Stop(Status.TAMPER_DETECTED, f"modified the judge's objects during {step}: "
                        f"{', '.join(reply.tampered[:8])}", rule="integrity", changed=reply.tampered)
        if reply.python_threads > 0:
            raise _Stop(Status.TAMPER_DETECTED, f"left {reply.python_threads} extra Python thread(s) running after "
                        f"{step}: work must finish inside forward()", rule="threads")
        if reply.processes:
            raise _Stop(Status.TAMPER_DETECTED, f"left processes running after {step}: {reply.processes[:3]}",
                        rule="processes")
        if not reply.ok:
            error = reply.error or msg.ErrorInfo(type="error", message="")
            if error.kind is msg.FailureKind.NOT_BUILT:
                raise _Stop(Status.COMPILE_ERROR, f"{step}: {error.message[:3000]}", stage="load", rule="not_built",
                            error=error.model_dump(mode="json"))
            what = f"{error.type}: {error.message[:1500]}"
            where = f" at {error.where}" if error.where else ""
            info = error.model_dump()
            if reply.oom:
                raise _Stop(Status.RUNTIME_ERROR, f"ran out of device memory during {step}{where}: {what}", error=info)
            raise _Stop(Status.RUNTIME_ERROR, f"raised during {step}{where}: {what}", error=info)

    def output(self, reply: msg.TrialReply | msg.GoReply, payloads: list[bytes], step: str) -> torch.Tensor:
        """The candidate's output rebuilt from raw bytes; a wrong dtype or shape is INCORRECT."""
        expected_dtype = dtype_name(self.task.output_dtype)
        if reply.dtype != expected_dtype:
            raise _Stop(Status.INCORRECT, f"{step}: output dtype is {reply.dtype}, expected {expected_dtype}")
        if list(reply.shape) != list(self.task.output_shape):
            raise _Stop(Status.INCORRECT, f"{step}: output shape is {reply.shape}, expected "
                        f"{list(self.task.output_shape)}")
        try:
            return tensor_from_bytes(payloads[0] if payloads else b"", reply.dtype, list(reply.shape))
        except ValueError as exc:
            raise _Stop(Status.TAMPER_DETECTED, f"{step}: malformed output payload: {exc}", rule="protocol") from None

    def truth(self, shape: tuple[int, ...], distribution: str, seed: int, *,
              timed: bool = False) -> tuple[torch.Tensor, list[str], float | None]:
        """fp64 ground truth and input fingerprints, computed here in the trusted parent; for a timed call (`timed`)
        also the device time of making its inputs (sandbox/execution/making.py), else None."""
        device = torch.device(self.device)
        make = lambda: self.task.make_inputs(shape, distribution, seed, device)  # noqa: E731
        inputs, make_ms = made_on_device(make, device) if timed else (make(), None)
        truth = self.task.ground_truth(inputs).cpu()
        prints = fingerprint(inputs)
        del inputs
        self.truth_checks += 1
        return truth, prints, make_ms

    # --- phases -----------------------------------------------------------------------------------

    def start(self, work_dir: Path, fields: dict[str, Any]) -> None:
        """Start the isolated child and wait until torch (and the device) is up in it."""
        self.work_dir = work_dir
        if self.warm is not None:  # up since before this candidate existed: its start is not this candidate's cost
            self.session = self.warm.hand_over(self.config.run_timeout_s)
            fields["environment"] = self.warm.environment or describe(self.device, self.session.mechanism)
            self.stages.update(self.warm.pre_stages())
            self.trace_probe = self.warm.trace_probe
            return
        self.session = ChildSession("execute", self.task.id, self.device, work_dir, self.config,
                                    gpu=self.is_cuda, wall_s=self.config.run_timeout_s,
                                    extra_env=self.extensions_env(), source=self.source_path)
        fields["environment"] = describe(self.device, self.session.mechanism)
        ready, _ = self.read(self.session.receive(READY_TIMEOUT_S), msg.Ready, "start-up")
        self.trace_probe = ready.trace

    def calibrate(self) -> None:
        """Before the candidate exists: the clocks' overhead, what making a timed call's inputs costs the child (which
        sizes the lead before each call), and what an empty timed round trip costs."""
        if self.warm is not None and self.warm.calibration is not None:
            # Measured by this method on this child before any candidate existed (sandbox/execution/warm.py).
            self.calibration = self.warm.calibration
            return
        clock, _ = self.ask(msg.Calibrate(reps=CLOCK_CALIBRATION_REPS, shape=list(self.shape),
                                          distributions=list(self.timing_distributions())),
                            msg.CalibrateReply, "calibration", READY_TIMEOUT_S)
        assert isinstance(clock, msg.CalibrateReply)
        pool, size = self.timing_distributions(), self.batch_size()
        count = GPU_EMPTY_CALLS if self.is_cuda else EMPTY_CALLS
        empty = tuple(self.timed_batch(i, self.draw(pool, size), empty=True) for i in range(count))
        self.calibration = Calibration(empty_calls=empty, flush_ms=clock.flush_ms, lead_ms=clock.lead_ms,
                                       make_host_ms=clock.make_host_ms)

    def extensions_env(self) -> dict[str, str]:
        """Where the child finds the build stage's extensions, when not in its private copy.

        Under bubblewrap both children see their build directory at /build, so the copy is where the build
        was. The weaker mechanisms (development only) show host paths: in a copy at another path ninja would
        find every command changed and the child would refuse to build, so the child is pointed at the build
        stage's own directory. Those mechanisms show candidates the host's files anyway: the copy protects
        nothing there."""
        if self.build_dir is None or isolation.available_mechanism(self.config.isolation) == "bwrap":
            return {}
        return {"TORCH_EXTENSIONS_DIR": str(self.build_dir / "ext")}

    def load(self) -> None:
        """Import the candidate: from here on, the child runs code we do not trust. Its extensions are built
        already, so the import is bounded by `load_timeout_s`; a child still importing then is ended."""
        self.candidate_loaded = True
        limit = self.config.load_timeout_s
        # The child's recorder starts before the import: on a GPU only where its probe saw device work recorded, on
        # the CPU (nothing to record there) only when asked, which drives its paths in the CPU tests.
        if self.config.traces(self.is_cuda) and (self.trace_probe == "available" or not self.is_cuda):
            self.trace_key = tracing.new_key()
        try:
            self.ask(msg.Load(trace_key=self.trace_key.hex() if self.trace_key else None), msg.LoadReply,
                     "import of the candidate", limit)
        except ChildFailure as failure:
            if failure.kind != "timeout":
                raise
            tail = "\n".join(failure.stderr.strip().splitlines()[-15:])
            raise _Stop(Status.TIMEOUT, f"the import of the candidate (its module and ModelNew()) did not finish "
                        f"within load_timeout_s = {limit:g} s, while an honest import of built extensions takes a "
                        "few seconds. Compiling belongs to the build stage, which builds every extension at "
                        "import; the device stage only loads them. Move slow set-up out of the import"
                        + (f"\nlast output:\n{tail}" if tail else ""), stage="load", failure="timeout") from None

    def correctness(self) -> None:
        """Fresh seeds over every distribution, in rounds of one trial per distribution; all must pass, and the
        candidate must run its own kernel. A round with a failure ends the stage: the verdict is decided, and
        that round already says which distributions fail (a rejected candidate's device time is what the
        remaining rounds would have cost, 0.3 s of kl_div's 1.2 s on an H100). A candidate that passes runs
        every round: as many trials as before. A paired distribution (Task.paired_distributions) gets a second
        trial in each round, with the first's targets and fresh predictions (reference.task.sharing_targets): an
        answer that does not read every prediction, or that is cached under the targets, fails one of the two."""
        index = 0
        for _ in range(self.config.trials_per_distribution):
            for distribution in self.task.distributions:
                seed = secrets.randbits(62)
                seeds = [seed, sharing_targets(seed, secrets.randbits(62))] \
                    if distribution in self.task.paired_distributions else [seed]
                for seed in seeds:
                    self.trials.append(self.trial(index, self.shape, distribution, seed=seed))
                    index += 1
            if any(not t.passed for t in self.trials):
                break
        failed = [t for t in self.trials if not t.passed]
        if failed:
            first = failed[0]
            which = ", ".join(dict.fromkeys(t.distribution for t in failed))
            raise _Stop(Status.INCORRECT, f"{len(failed)} of {len(self.trials)} trials failed ({which} inputs); "
                        f"first: trial {first.trial} ({first.distribution} inputs, shape {first.shape}, seed "
                        f"{first.seed}): {first.message}")
        if self.task.requires_custom_kernel and not self.custom_evidence:
            raise _Stop(Status.POLICY_VIOLATION, "forward() ran no code the candidate compiled: this task requires a "
                        "custom kernel (a load_inline extension or a Triton kernel), not only PyTorch operators",
                        rule="custom_kernel_required")

    def timing(self, baselines: dict, details: dict[str, Any]) -> tuple[Performance, bool]:
        """Estimate, then batches of calls, each call with its own seed and distribution, every output checked,
        until the median batch mean is precise enough (TIMING_PRECISION) or max_reps calls were timed."""
        official = self.task.distributions[0]
        est, _ = self.ask(msg.Estimate(shape=list(self.shape), distribution=official, seed=secrets.randbits(62)),
                          msg.EstimateReply, "timing estimate", self.config.call_timeout_s * ESTIMATE_TIMEOUT_FACTOR)
        reps, _ = plan_reps(est.estimate_ms, self.config.timing_budget_ms, self.config.min_reps, self.config.max_reps)
        size = self.batch_size()
        (warm, timed), throttle = self.clocked(lambda: self.timed_batches(reps, size))
        clock_details: dict[str, Any] = {"check": throttle.as_dict(), "retimed": False}
        if throttle.throttled:  # a throttled card's time is not comparable: timed once more, fresh
            (warm, timed), again = self.clocked(lambda: self.timed_batches(reps, size))
            clock_details = {"check": again.as_dict(), "retimed": True, "first": throttle.as_dict()}
            if again.throttled:
                self.unranked_reason = f"the card was throttled during both timings: {again.detail}"
        self.check_trace(details)
        device_type = torch.device(self.device).type
        details["timing"] = dataclasses.asdict(self.timing_details(warm, timed, reps, size, clock_details))
        claims = [b.claim_ms for b in timed]
        windows = [b.window_ms for b in timed]
        judge = [b.judge_ms for b in timed]
        runs, empty_runs = [b.call_run_ms for b in timed], [c.call_run_ms for c in self.empty_calls]
        empty_window = min(c.window_ms for c in self.empty_calls)
        # The empty batches made real inputs too (calibrate), so the windows and CPU times beyond theirs are the calls'.
        breach = (plausibility.timing_bound(claims, windows, runs, empty_runs, device_type,
                                            training=self.task.training is not None)
                  or plausibility.untimed_work_bound(claims, windows, empty_window, device_type)
                  or plausibility.unexplained_wall([b.unexplained_ms for b in timed],
                                                   [c.unexplained_ms for c in self.empty_calls], windows, device_type)
                  or plausibility.unattributed_work([b.excess_ms for b in timed], judge, claims, device_type))
        if breach:
            raise _Stop(Status.TAMPER_DETECTED, breach.diagnosis, rule=breach.rule, **breach.details)
        scale = plausibility.cpu_scale(claims, runs, empty_runs) if not self.is_cuda else 1.0
        details["timing"]["cpu_scale"] = scale
        ranked = [b.ranked_ms * scale for b in timed]
        stats = TimingStats(**{**summarize(ranked), "reps": details["timing"]["timed_calls"]})
        perf = _performance(self.task, self.shape, stats, baselines, self.peak_memory)
        breach = plausibility.speed_of_light(stats.median_ms, perf.min_bytes, perf.bandwidth_bytes_per_s, device_type)
        if breach:
            raise _Stop(Status.TAMPER_DETECTED, breach.diagnosis, rule=breach.rule, **breach.details)
        return perf, details["timing"]["hidden_work"]

    def timing_details(self, warm: list[TimedCall], timed: list[TimedCall], reps: int, size: int,
                       clocks_seen: dict[str, Any]) -> TimingDetails:
        """`details["timing"]`: what the parent saw around every timed batch, and the inputs of its bounds."""
        pool = self.timing_distributions()
        every = [d for b in (*warm, *timed) for d in b.distributions]
        runs = [b.run_ms for b in timed]
        empty_runs = [c.run_ms for c in self.empty_calls]
        calibration = self.calibration
        return TimingDetails(
            batch_size=size, timed_batches=len(timed), warmup_batches=len(warm),
            timed_calls=sum(b.calls for b in timed), warmup_calls=sum(b.calls for b in warm),
            planned_calls=reps,
            distributions={d: every.count(d) for d in pool},
            truth_checks=self.truth_checks,
            window_median_ms=statistics.median(b.window_ms for b in timed),
            run_median_ms=statistics.median(runs),
            empty_call_run_ms=statistics.median(empty_runs),
            empty_call_window_ms=min(c.window_ms for c in self.empty_calls),
            call_floor_ms=plausibility.call_floor_ms([b.call_run_ms for b in timed],
                                                     [c.call_run_ms for c in self.empty_calls]),
            # Where the CPU times came from (sandbox/execution/cputime.py), and how many batches' readings found
            # a thread of the sandbox still on a CPU after cputime.SETTLE_S.
            cpu_time_source=", ".join(sorted({b.cpu_source for b in (*self.empty_calls, *timed)})),
            cpu_readings_unsettled=sum(not b.settled for b in (*self.empty_calls, *timed)),
            arm_windows_ms=[round(b.arm_ms, 5) for b in timed],
            truth_ms=[round(b.truth_ms, 5) for b in timed],
            empty_arm_window_ms=min(c.arm_ms for c in self.empty_calls),
            made_ms=[round(b.made_ms, 5) for b in timed],
            judge_ms=[round(b.judge_ms, 5) for b in timed],
            unattributed_ms=[round(b.excess_ms, 5) for b in timed],
            gaps_ms=[round(b.gap_ms, 5) for b in timed],
            ranked_ms=[round(b.ranked_ms, 5) for b in timed],
            unexplained_ms=[round(b.unexplained_ms, 5) for b in timed],
            empty_unexplained_ms=statistics.median(c.unexplained_ms for c in self.empty_calls),
            lead_ms=calibration.lead_ms if calibration is not None else 0.0,
            flush_ms=calibration.flush_ms if calibration is not None else 0.0,
            speed_of_light_limit=plausibility.IMPLAUSIBLE_SOL_FRACTION["cuda" if self.is_cuda else "cpu"],
            claims_ms=[round(c, 5) for b in timed for c in b.claims_ms],
            batch_claims_ms=[round(b.claim_ms, 5) for b in timed],
            windows_ms=[round(b.window_ms, 5) for b in timed],
            runs_ms=[round(r, 5) for r in runs],
            # Whether the host clock decided the median: most batches saw more than their events. A flagged
            # batch is always claimed by the host's time, so hidden work buys nothing in any batch; one flagged
            # batch in several is a host that fell behind the device once (on the H100, 2026-11-25: honest
            # cross_entropy_fast, 1 batch of 7 at 1.37x, the others 1.07-1.11x), not a finding to report.
            hidden_work=host_decided(timed),
            # Which batches the host clock decided, and host over events for each (a stall: one batch a little
            # over; hidden work: every batch far over).
            hidden_work_batches=[i for i, b in enumerate(timed) if b.hidden_work],
            host_over_events=[round(b.host_ms / b.event_ms, 3) if b.event_ms else None for b in timed],
            clocks=clocks_seen)

    def clocked(self, timing: Callable[[], T]) -> tuple[T, clocks.ThrottleCheck]:
        """`timing()` between two readings of the card's clocks, and whether it was throttled meanwhile (unknown on
        the CPU and without NVML)."""
        card = self.config.clocks_index if self.config.clocks_index is not None else self.device
        before = clocks.read(card)
        result = timing()
        return result, clocks.check(before, clocks.read(card))

    def check_trace(self, details: dict[str, Any]) -> None:
        """Stop the kernel trace and judge it (sandbox/execution/tracing.py): `details["trace"]`, or tampering."""
        if self.trace_key is None:
            details["trace"] = {"status": "unavailable", "reason": self.trace_probe} if self.trace_probe else \
                {"status": "off"}
            return
        reply, _ = self.ask(msg.TraceEnd(), msg.TraceEndReply, "the end of the kernel trace", TRACE_END_TIMEOUT_S)
        assert isinstance(reply, msg.TraceEndReply) and self.work_dir is not None
        try:
            texts = tracing.read_segments(self.work_dir, reply.files)
        except tracing.TraceReadError as exc:
            texts, unreadable = [], str(exc)
        else:
            unreadable = ""
        if self.trace_probe != "available":  # the CPU, or a host whose profiler records no device work
            details["trace"] = {"status": "unavailable", "reason": self.trace_probe, "segments": len(texts),
                                "bytes": sum(len(t) for t in texts), "calls": self.traced_calls}
            return
        if unreadable or not texts:
            outcome = tracing.TraceOutcome("refused", rule="trace_cut", message=(
                f"the kernel trace is absent or unreadable after CUDA work ran ({unreadable or 'no segment'}"
                f"{'; the recorder said: ' + reply.recorder_error if reply.recorder_error else ''})"))
        else:
            outcome = tracing.judge(texts, self.trace_key, self.traced_batches, self.warmup_calls)
        details["trace"] = {**outcome.details, "status": outcome.status, "calls": self.traced_calls,
                            "segments": len(texts)}
        if outcome.refused:
            raise _Stop(Status.TAMPER_DETECTED, f"kernel trace: {outcome.message}", rule=outcome.rule,
                        trace=details["trace"])

    def timed_batches(self, reps: int, size: int) -> tuple[list[TimedCall], list[TimedCall]]:
        """(warm-up, timed) batches of `size` calls with fresh distributions, until the median batch mean is
        precise enough (TIMING_PRECISION, after MIN_BATCHES) or `reps` calls were timed."""
        pool = self.timing_distributions()
        first = self.traced_calls
        warm = [self.timed_batch(i, self.draw(pool, size)) for i in range(WARMUP_BATCHES)]
        self.warmup_calls.update(range(first, self.traced_calls))
        timed: list[TimedCall] = []
        while sum(b.calls for b in timed) < reps:
            timed.append(self.timed_batch(len(warm) + len(timed), self.draw(pool, size)))
            if len(timed) >= MIN_BATCHES and _precise(timed):
                break
        return warm, timed

    def extra_shapes(self, shapes: tuple[tuple[int, ...], ...]) -> None:
        """Other sizes, reported beside the verdict; only policy and tampering there change it."""
        official = self.task.distributions[0]
        for i, extra_shape in enumerate(shapes):
            try:
                self.extras.append(self.trial(i, tuple(extra_shape), official, extra=True))
            except _Stop as stop:
                if stop.status in (Status.POLICY_VIOLATION, Status.TAMPER_DETECTED):
                    raise
                self.extras.append(TrialResult(trial=i, distribution=official, shape=list(extra_shape), seed=0,
                                               passed=False, message=stop.diagnosis))
                break  # the child stops after an error; the remaining shapes are not run

    # --- one trial, one timed call ------------------------------------------------------------

    def trial(self, index: int, shape: tuple[int, ...], distribution: str, *, extra: bool = False,
              seed: int | None = None) -> TrialResult:
        seed = secrets.randbits(62) if seed is None else seed
        step = f"{'extra shape' if extra else 'trial'} {index} ({distribution}, shape {list(shape)})"
        assert self.session is not None
        # The child makes its inputs and runs the candidate while the parent computes its own truth: a trial is not
        # timed, so the two may share the device, and the device is held for the longer of them, not their sum.
        self.session.send(msg.Trial(shape=list(shape), distribution=distribution, seed=seed).model_dump())
        truth = self.call_truth(shape, distribution, seed)
        reply, raw = self.read(self.session.receive(self.config.call_timeout_s), self.trial_reply, step)
        base = {"trial": index, "distribution": distribution, "shape": list(shape), "seed": seed}
        if reply.rejected_output:
            return TrialResult(**base, passed=False, message=reply.rejected_output)
        assert isinstance(reply, self.trial_reply)
        if reply.before != truth.prints:
            raise _Stop(Status.TAMPER_DETECTED, f"{step}: the inputs the child generated differ from the judge's: "
                        "the input generator was tampered with", rule="inputs", judge=truth.prints, child=reply.before)
        if reply.after != truth.prints:
            return TrialResult(**base, passed=False, message=self.modified_inputs)
        self.record_evidence(reply)
        try:
            out = self.output(reply, raw.payloads, step)
        except _Stop as stop:
            if stop.status is Status.INCORRECT:
                return TrialResult(**base, passed=False, message=stop.diagnosis)
            raise
        cmp = compare(out, truth.output, self.task.tolerance.atol, self.task.tolerance.rtol)
        fields = dict(max_abs_error=cmp.max_abs_error, max_rel_error=cmp.max_rel_error, worst_index=cmp.worst_index,
                      expected=cmp.expected, got=cmp.got)
        if not cmp.passed:
            return TrialResult(**base, passed=False, message=f"{self.output_name}{cmp.message}", **fields)
        failure = self.check_trial(step, shape, truth)
        return TrialResult(**base, passed=failure is None, message=failure, **fields)

    def timing_distributions(self) -> tuple[str, ...]:
        """Where each timed call's distribution is drawn from, uniformly and afresh per call (the task decides)."""
        return tuple(self.task.timed_distributions())

    @staticmethod
    def draw(pool: tuple[str, ...], size: int) -> tuple[str, ...]:
        return tuple(secrets.choice(pool) for _ in range(size))

    def batch_size(self) -> int:
        """Calls per timed batch (sandbox/execution/timing.py; a call's minimal bytes stand for its inputs' size)."""
        return batch_size(torch.device(self.device), self.task.min_bytes(self.shape))

    def timed_batch(self, index: int, distributions: tuple[str, ...], *, empty: bool = False) -> TimedCall:
        """The parent's truth for a fresh seed per call -> arm (the window's buffers) -> go (each call's inputs made
        in the child just before it, the batch timed by both clocks) -> inspect; every call's output checked against
        the parent's fp64 truth for its own seed. No seed reaches the child before `go`."""
        assert self.session is not None
        step = f"{'empty ' if empty else ''}timed batch {index}"
        seeds = [secrets.randbits(62) for _ in distributions]
        n = len(distributions)
        timeout = self.config.call_timeout_s * n
        if not empty and self.trace_key is not None:
            self.traced_batches.append(n)  # before `go`: a batch cut short still ran its canaries
        if self.meter is None or self.meter.root_pid != self.session.process.pid:
            self.meter = cputime.Meter(self.session.process.pid, self.session.process.cgroup)
        truth_started = time.perf_counter()
        truths = [] if empty else [self.call_truth(self.shape, d, seed, timed=True)
                                   for d, seed in zip(distributions, seeds)]
        truth_ms = (time.perf_counter() - truth_started) * 1e3
        own_run_ms = 0.0 if self.is_cuda else self.own_making_ms(distributions, seeds, truths)
        arm_started = time.perf_counter()
        self.ask(self.arm_command(n, empty), msg.ArmReply, step, timeout)
        arm_ms = (time.perf_counter() - arm_started) * 1e3
        go = msg.Go(shape=list(self.shape), calls=[msg.ArmedCall(distribution=d, seed=seed)
                                                   for d, seed in zip(distributions, seeds)])
        ran = self.meter.read()
        started = time.perf_counter()
        raw = self.session.request(go.model_dump(), timeout)
        window_ms = (time.perf_counter() - started) * 1e3
        done = self.meter.read()
        went, _ = self.read(raw, msg.GoReply, step)
        if went.rejected_output:
            raise _Stop(Status.INCORRECT, f"{step}: {went.rejected_output}")
        assert isinstance(went, msg.GoReply)
        if (len(raw.payloads) != n or len(went.times_ms) != n or went.made_ms < 0
                or (self.is_cuda and len(went.gaps_ms) != n - 1) or not all(v >= 0 for v in went.gaps_ms)):
            raise _Stop(Status.TAMPER_DETECTED, f"{step}: {len(raw.payloads)} outputs, {len(went.times_ms)} times and "
                        f"{len(went.gaps_ms)} gaps for {n} calls (a forged reply)", rule="protocol")
        outs = [self.output(went, [payload], step) for payload in raw.payloads]
        inspected, _ = self.read(self.session.request(msg.Inspect().model_dump(), timeout), msg.InspectReply, step)
        batch = self.measured(went, truths, n, window_ms=window_ms, run_ms=done.since(ran) / 1e6, arm_ms=arm_ms,
                              truth_ms=truth_ms, distributions=distributions, own_run_ms=own_run_ms,
                              cpu_source=done.source, settled=ran.settled and done.settled)
        if empty:
            return batch
        if len(inspected.after_all) != n:
            raise _Stop(Status.TAMPER_DETECTED, f"{step}: inputs of {len(inspected.after_all)} calls inspected, "
                        f"{n} were run (a forged reply)", rule="protocol")
        for i, (truth, after, out) in enumerate(zip(truths, inspected.after_all, outs)):
            if after != truth.prints:
                raise _Stop(Status.INCORRECT, f"{step}, call {i}: {self.modified_inputs} (or its inputs were made "
                            "otherwise than the judge's generator makes them)")
            cmp = compare(out, truth.output, self.task.tolerance.atol, self.task.tolerance.rtol)
            if not cmp.passed:
                raise _Stop(Status.INCORRECT, f"timed call {index * n + i} returned a wrong result ({distributions[i]} "
                            f"inputs, {step}; {cmp.message}): results must be computed on every call from that call's "
                            "inputs, not cached, deferred or estimated")
            self.check_timed_call(f"timed call {index * n + i} ({distributions[i]} inputs, {step})", i, truth)
        self.record_peak(inspected.peak_memory_bytes, n)
        return batch

    def measured(self, went: msg.GoReply, truths: list[CallTruth], n: int, **seen: Any) -> TimedCall:
        """One batch in per-call figures: what the child claims, what the parent saw, the judge's own work inside the
        round trip, and what the batch ranks (sandbox/execution/plausibility.py, `ranked_claim`)."""
        judge_ms = sum(self.made_reference(d, t.make_ms) for d, t in zip(seen["distributions"], truths)) / n
        made_ms = went.made_ms / n
        excess_ms = 0.0
        calibration = self.calibration
        if self.is_cuda and calibration is not None and truths:
            own = self.own_flushes_ms(n)
            excess_ms = made_ms - own - judge_ms
            if plausibility.too_short(excess_ms, own + judge_ms):
                raise _Stop(Status.TAMPER_DETECTED, "the child reports its span before the calls as "
                            f"{went.made_ms:.4f} ms, but its flushes and the making of the inputs alone take "
                            f"{n * (own + judge_ms):.4f} ms on this device (the judge made the same inputs and timed "
                            "that): a forged reply", rule="protocol")
            excess_ms -= self.empty_span_excess_ms(judge_ms)
        flush_ms = calibration.flush_ms if calibration is not None else 0.0
        gap_ms = sum(g - flush_ms for g in went.gaps_ms) / max(len(went.gaps_ms), 1)
        run_ms, window_ms = seen.pop("run_ms") / n, seen.pop("window_ms") / n
        ranked = plausibility.ranked_claim(went.time_ms, device_type="cuda" if self.is_cuda else "cpu",
                                           excess_ms=excess_ms, make_ms=judge_ms)
        return TimedCall(distribution=seen["distributions"][0], claim_ms=went.time_ms, window_ms=window_ms,
                         run_ms=run_ms, hidden_work=went.hidden_work, calls=n, claims_ms=tuple(went.times_ms),
                         distributions=seen["distributions"], host_ms=went.host_ms / n, event_ms=went.event_ms,
                         arm_ms=seen["arm_ms"] / n, truth_ms=seen["truth_ms"] / n, cpu_source=seen["cpu_source"],
                         settled=seen["settled"], made_ms=made_ms, judge_ms=judge_ms, excess_ms=excess_ms,
                         gap_ms=gap_ms, ranked_ms=ranked,
                         unexplained_ms=window_ms - (went.made_ms + sum(went.times_ms) + sum(went.gaps_ms)) / n,
                         own_run_ms=seen["own_run_ms"] / n)

    def own_flushes_ms(self, n: int) -> float:
        """GPU: the device time of a batch's own flushes (its lead and the one before the first call), per call."""
        calibration = self.calibration
        assert calibration is not None
        flushes = lead_flushes(calibration.lead_ms, calibration.make_host_ms, n, calibration.flush_ms) + 1
        return flushes * calibration.flush_ms / n

    def empty_span_excess_ms(self, judge_ms: float) -> float:
        """GPU: what the span before an empty batch's calls held beyond the judge's own work in it (`judge_ms`, and its
        flushes), per call: the median over the empty batches, which ran before the candidate existed and make the same
        inputs through the same lead. It is the harness's own share of that span (the device waiting on the host
        between the makings and the first call), which no candidate caused, so a timed batch is charged only beyond
        it: honest cross_entropy_fast on an H200 (2026-11-28) held 0.021-0.026 ms a call beyond the judge's work,
        7% of its making, which 2% of the making as slack charged (+5% on its ranked median). Never below zero."""
        spans = [c.made_ms - self.own_flushes_ms(c.calls) for c in self.empty_calls]
        return max(0.0, statistics.median(spans) - judge_ms) if spans else 0.0

    def own_making_ms(self, distributions: tuple[str, ...], seeds: list[int], truths: list[CallTruth]) -> float:
        """CPU: the parent thread's CPU time making the batch's inputs (sandbox/execution/making.py), from the truths
        just computed, or, for an empty batch (no truths), by making them here and dropping them."""
        if truths:
            return sum(t.make_ms or 0.0 for t in truths)
        device = torch.device(self.device)
        return sum(made_on_device(lambda d=d, s=s: self.task.make_inputs(self.shape, d, s, device), device)[1]
                   for d, s in zip(distributions, seeds))

    # --- what a training task changes (sandbox/execution/training.py overrides these) -----------------------------

    trial_reply = msg.TrialReply  # (a class attribute, not a dataclass field: no annotation)
    modified_inputs = "forward() modified its inputs in place"
    output_name = ""
    """What a failed output comparison's message is prefixed with (a training step's output is its loss)."""

    def arm_command(self, calls: int, empty: bool) -> msg.Arm:
        return msg.Arm(calls=calls, shape=list(self.shape), null=empty)

    def made_reference(self, distribution: str, make_ms: float | None) -> float:
        """The device time making one call's inputs of `distribution` takes on this device: the least of the parent's
        own measurements for this candidate (MAKE_HISTORY of them). One measurement alone can carry the parent's host
        falling behind its device (another thread holding the interpreter lock: the worker runs several), which only
        lengthens it; the device's own time for the same kernels varies by 0.35% (H100,
        docs/results/inputs-h100-2026-11-28.md), about the spread between seeds, so the least is that time."""
        history = self.makes_ms.setdefault(distribution, [])
        if make_ms is not None:
            history.append(make_ms)
            del history[:-MAKE_HISTORY]
        return min(history) if history else 0.0

    def call_truth(self, shape: tuple[int, ...], distribution: str, seed: int, *, timed: bool = False) -> CallTruth:
        """What the parent knows of one call (a trial or a timed call) before the child runs it; for a timed call
        (`timed`) also the device time of making its inputs."""
        output, prints, make_ms = self.truth(shape, distribution, seed, timed=timed)
        return CallTruth(output=output, prints=prints, make_ms=make_ms)

    def record_evidence(self, reply: msg.TrialReply) -> None:
        """What a trial showed of the candidate's own code running (the custom-kernel rule)."""
        self.custom_evidence.update(reply.custom_calls, reply.custom_ops, reply.custom_kernels)

    def check_trial(self, step: str, shape: tuple[int, ...], truth: CallTruth) -> str | None:
        """Why a trial whose output passed still fails, or None; nothing more for a forward."""
        return None

    def check_timed_call(self, label: str, position: int, truth: CallTruth) -> None:
        """Checks of one timed call beyond its output and inputs (`position` in its batch); none for a forward."""

    def record_peak(self, batch_peak: int | None, calls: int) -> None:
        """The most device memory a call allocated beyond its inputs: a forward batch keeps only the calls'
        outputs alive, so the batch's peak is a call's (to within the earlier outputs)."""
        if batch_peak is not None:
            self.peak_memory = max(self.peak_memory or 0, batch_peak)


def host_decided(batches: list[TimedCall]) -> bool:
    """Whether most timed batches were claimed by the host clock (hidden work decided the median)."""
    return 2 * sum(b.hidden_work for b in batches) > len(batches)


def _precise(batches: list[TimedCall]) -> bool:
    """Whether the bootstrap 95% interval of the median batch mean is within TIMING_PRECISION of the median."""
    stats = summarize([b.ranked_ms for b in batches])
    low, high = stats["ci95_ms"]
    return stats["median_ms"] > 0 and (high - low) / 2 <= TIMING_PRECISION * stats["median_ms"]


def _performance(task: Task, shape: tuple[int, ...], stats: TimingStats, baselines: dict,
                 peak: int | None) -> Performance:
    base_stats = {name: TimingStats(**values) for name, values in baselines.get("baselines", {}).items()}
    bandwidth = baselines.get("bandwidth_bytes_per_s")
    min_bytes = task.min_bytes(shape)
    sol = plausibility.speed_of_light_fraction(stats.median_ms, min_bytes, bandwidth)
    return Performance(
        candidate=stats,
        baselines=base_stats,
        speedups={name: b.median_ms / stats.median_ms for name, b in base_stats.items()},
        min_bytes=min_bytes,
        bandwidth_bytes_per_s=bandwidth,
        speed_of_light_fraction=sol,
        peak_memory_bytes=peak,
        reference_peak_memory_bytes=baselines.get("reference_peak_memory_bytes"),
    )
