"""Run one prepared candidate in an isolated child: correctness trials, then timing, as named phases.

`execute` reads top to bottom: start the child, calibrate its clocks, load the candidate, correctness,
timing, extra shapes. Each phase is a method of `Execution`, timed by the one `stage` context manager.
Until `candidate_loaded` is set, no candidate code has run, so a failure of the child is the judge's
(system_error, retried); from then on it is the candidate's.

Timing (the heart of the integrity scheme, see docs/threat-model.md): every timed call gets inputs from
its own seed, drawn here with `secrets` and sent to the child only when that call is armed, from a
distribution drawn at random for that call. The parent computes fp64 truth and input fingerprints for
the seed while the child generates the inputs (never while a call is timed), checks every timed output,
and bounds what the child claims for each call with what it can see itself: the wall time of the call's
round trip, and the CPU time the kernel accounted to the sandbox during it (sandbox/plausibility.py).
"""

from __future__ import annotations

import contextlib
import secrets
import shutil
import statistics
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import torch

from reference import Task, get_task
from sandbox import cputime, isolation, plausibility
from sandbox import protocol as msg
from sandbox.compare import compare, dtype_name, fingerprint, tensor_from_bytes
from sandbox.config import JudgeConfig
from sandbox.environment import describe
from sandbox.supervisor import ChildFailure, ChildResult, ChildSession
from sandbox.timing import plan_reps, summarize
from sandbox.verdict import Performance, Status, TimingStats, TrialResult, Verdict

if TYPE_CHECKING:
    from sandbox.pipeline import PreparedCandidate

READY_TIMEOUT_S = 180.0
"""Starting the child: Python, torch and (on a GPU) a CUDA context; seconds on a loaded machine."""
CLOCK_CALIBRATION_REPS = 50
"""Empty calls the child times to learn its clocks' own overhead (synchronise + timestamp)."""
EMPTY_CALLS = 10
"""Timed round trips of an empty call before the candidate is loaded: what a round trip costs the parent's
clock beyond the call itself (the timing bound subtracts the cheapest)."""
ESTIMATE_TIMEOUT_FACTOR = 4
"""The estimate makes 4 calls (1 warm-up + 3 timed) on one input set."""

R = TypeVar("R", bound=msg.Reply)


class _Stop(Exception):
    """Ends execution early with a verdict."""

    def __init__(self, status: Status, diagnosis: str, **details: Any) -> None:
        super().__init__(diagnosis)
        self.status = status
        self.diagnosis = diagnosis
        self.details = details


@dataclass(frozen=True)
class TimedCall:
    distribution: str
    claim_ms: float
    """What the child says the call took."""
    window_ms: float
    """What the parent's clock saw: from sending `go` to reading the reply."""
    run_ms: float
    """CPU time the sandbox tree ran in that window, by the kernel's accounting (waiting for a CPU excluded)."""
    hidden_work: bool


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
    empty_calls: list[TimedCall] = field(default_factory=list)
    parent_cpu_s: dict[str, float] = field(default_factory=dict)
    truth_checks: int = 0
    peak_memory: int | None = None
    """Most device memory the candidate allocated beyond its inputs in one timed call (CUDA only)."""

    @property
    def is_cuda(self) -> bool:
        return torch.device(self.device).type == "cuda"

    @contextlib.contextmanager
    def stage(self, name: str) -> Iterator[None]:
        """The one way to time a phase: wall seconds in `stages`, the parent's CPU seconds beside them."""
        wall, cpu = time.monotonic(), time.process_time()
        try:
            yield
        finally:
            self.stages[name] = self.stages.get(name, 0.0) + time.monotonic() - wall
            self.parent_cpu_s[name] = self.parent_cpu_s.get(name, 0.0) + time.process_time() - cpu

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

    def truth(self, shape: tuple[int, ...], distribution: str, seed: int) -> tuple[torch.Tensor, list[str]]:
        """fp64 ground truth and input fingerprints, computed here in the trusted parent."""
        inputs = self.task.make_inputs(shape, distribution, seed, torch.device(self.device))
        truth = self.task.ground_truth(inputs).cpu()
        prints = fingerprint(inputs)
        del inputs
        self.truth_checks += 1
        return truth, prints

    # --- phases -----------------------------------------------------------------------------------

    def start(self, work_dir: Path, fields: dict[str, Any]) -> None:
        """Start the isolated child and wait until torch (and the device) is up in it."""
        self.session = ChildSession("execute", self.task.id.value, self.device, work_dir, self.config,
                                    gpu=self.is_cuda, wall_s=self.config.run_timeout_s)
        fields["environment"] = describe(self.device, self.session.mechanism)
        self.read(self.session.receive(READY_TIMEOUT_S), msg.Ready, "start-up")

    def calibrate(self) -> None:
        """Before the candidate exists: the clocks' overhead, and what an empty timed round trip costs."""
        self.ask(msg.Calibrate(reps=CLOCK_CALIBRATION_REPS), msg.CalibrateReply, "calibration", READY_TIMEOUT_S)
        official = self.task.distributions[0]
        self.empty_calls = [self.timed_call(i, official, empty=True) for i in range(EMPTY_CALLS)]

    def load(self) -> None:
        """Import the candidate: from here on, the child runs code we do not trust."""
        self.candidate_loaded = True
        self.ask(msg.Load(), msg.LoadReply, "import of the candidate", self.config.compile_timeout_s)

    def correctness(self) -> None:
        """Fresh seeds over every distribution; all must pass, and the candidate must run its own kernel."""
        index = 0
        for distribution in self.task.distributions:
            for _ in range(self.config.trials_per_distribution):
                self.trials.append(self.trial(index, self.shape, distribution))
                index += 1
        failed = [t for t in self.trials if not t.passed]
        if failed:
            first = failed[0]
            raise _Stop(Status.INCORRECT, f"{len(failed)} of {len(self.trials)} trials failed; first: trial "
                        f"{first.trial} ({first.distribution} inputs, shape {first.shape}, seed {first.seed}): "
                        f"{first.message}")
        if self.task.requires_custom_kernel and not self.custom_evidence:
            raise _Stop(Status.POLICY_VIOLATION, "forward() ran no code the candidate compiled: this task requires a "
                        "custom kernel (a load_inline extension or a Triton kernel), not only PyTorch operators",
                        rule="custom_kernel_required")

    def timing(self, baselines: dict, details: dict[str, Any]) -> tuple[Performance, bool]:
        """Estimate, then warm-up and timed calls, each with its own seed and distribution, every output checked."""
        official = self.task.distributions[0]
        est, _ = self.ask(msg.Estimate(shape=list(self.shape), distribution=official, seed=secrets.randbits(62)),
                          msg.EstimateReply, "timing estimate", self.config.call_timeout_s * ESTIMATE_TIMEOUT_FACTOR)
        reps, warmup = plan_reps(est.estimate_ms, self.config.timing_budget_ms, self.config.min_reps,
                                 self.config.max_reps)
        pool = self.timing_distributions()
        calls = [self.timed_call(i, secrets.choice(pool)) for i in range(warmup + reps)]
        timed = calls[warmup:]
        claims = [c.claim_ms for c in timed]
        windows = [c.window_ms for c in timed]
        runs = [c.run_ms for c in timed]
        empty_runs = [c.run_ms for c in self.empty_calls]
        details["timing"] = {
            "scheme": "fresh seed per call",
            "timed_calls": reps, "warmup_calls": warmup,
            "distributions": {d: sum(c.distribution == d for c in calls) for d in pool},
            "truth_checks": self.truth_checks,
            "window_median_ms": statistics.median(windows),
            "run_median_ms": statistics.median(runs),
            "empty_call_run_ms": statistics.median(empty_runs),
            "empty_call_window_ms": min(c.window_ms for c in self.empty_calls),
            "call_floor_ms": plausibility.call_floor_ms(runs, empty_runs),
            "claims_ms": [round(c, 5) for c in claims],
            "windows_ms": [round(w, 5) for w in windows],
            "runs_ms": [round(r, 5) for r in runs],
            "hidden_work": any(c.hidden_work for c in timed),
        }
        breach = plausibility.timing_bound(claims, windows, runs, empty_runs)
        if breach:
            raise _Stop(Status.TAMPER_DETECTED, breach.diagnosis, rule=breach.rule, **breach.details)
        stats = TimingStats(**summarize(claims))
        perf = _performance(self.task, self.shape, stats, baselines, self.peak_memory)
        breach = plausibility.speed_of_light(stats.median_ms, perf.min_bytes, perf.bandwidth_bytes_per_s,
                                             torch.device(self.device).type)
        if breach:
            raise _Stop(Status.TAMPER_DETECTED, breach.diagnosis, rule=breach.rule, **breach.details)
        return perf, details["timing"]["hidden_work"]

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

    def trial(self, index: int, shape: tuple[int, ...], distribution: str, *, extra: bool = False) -> TrialResult:
        seed = secrets.randbits(62)
        truth, prints = self.truth(shape, distribution, seed)
        step = f"{'extra shape' if extra else 'trial'} {index} ({distribution}, shape {list(shape)})"
        reply, raw = self.ask(msg.Trial(shape=list(shape), distribution=distribution, seed=seed), msg.TrialReply, step,
                              self.config.call_timeout_s)
        base = {"trial": index, "distribution": distribution, "shape": list(shape), "seed": seed}
        if reply.rejected_output:
            return TrialResult(**base, passed=False, message=reply.rejected_output)
        assert isinstance(reply, msg.TrialReply)
        if reply.before != prints:
            raise _Stop(Status.TAMPER_DETECTED, f"{step}: the inputs the child generated differ from the judge's: "
                        "the input generator was tampered with", rule="inputs", judge=prints, child=reply.before)
        if reply.after != prints:
            return TrialResult(**base, passed=False, message="forward() modified its inputs in place")
        self.custom_evidence.update(reply.custom_calls, reply.custom_ops, reply.custom_kernels)
        try:
            out = self.output(reply, raw.payloads, step)
        except _Stop as stop:
            if stop.status is Status.INCORRECT:
                return TrialResult(**base, passed=False, message=stop.diagnosis)
            raise
        cmp = compare(out, truth, self.task.tolerance.atol, self.task.tolerance.rtol)
        return TrialResult(**base, passed=cmp.passed, max_abs_error=cmp.max_abs_error, max_rel_error=cmp.max_rel_error,
                           worst_index=cmp.worst_index, expected=cmp.expected, got=cmp.got, message=cmp.message)

    def timing_distributions(self) -> tuple[str, ...]:
        """Where each timed call's distribution is drawn from, uniformly and afresh per call (the task decides)."""
        return tuple(self.task.timed_distributions())

    def timed_call(self, index: int, distribution: str, *, empty: bool = False) -> TimedCall:
        """arm (fresh seed, inputs made and fingerprinted) -> go (timed by both clocks) -> inspect."""
        assert self.session is not None
        step = f"{'empty ' if empty else ''}timed call {index} ({distribution})"
        seed = secrets.randbits(62)
        timeout = self.config.call_timeout_s
        arm = msg.Arm(shape=list(self.shape), distribution=distribution, seed=seed, null=empty)
        self.session.send(arm.model_dump())
        # The child is making its inputs, not timing: the parent's own work for this call goes here.
        truth, prints = (None, None) if empty else self.truth(self.shape, distribution, seed)
        armed, _ = self.read(self.session.receive(timeout), msg.ArmReply, step)
        if prints is not None and armed.before != prints:
            raise _Stop(Status.TAMPER_DETECTED, f"{step}: the inputs the child generated differ from the judge's: "
                        "the input generator was tampered with", rule="inputs", judge=prints, child=armed.before)
        ran = cputime.tree_ns(self.session.process.pid)
        started = time.perf_counter()
        raw = self.session.request(msg.Go().model_dump(), timeout)
        window_ms = (time.perf_counter() - started) * 1e3
        run_ms = (cputime.tree_ns(self.session.process.pid) - ran) / 1e6
        went, _ = self.read(raw, msg.GoReply, step)
        if went.rejected_output:
            raise _Stop(Status.INCORRECT, f"{step}: {went.rejected_output}")
        assert isinstance(went, msg.GoReply)
        out = self.output(went, raw.payloads, step)
        inspected, _ = self.read(self.session.request(msg.Inspect().model_dump(), timeout), msg.InspectReply, step)
        if empty:
            return TimedCall(distribution, went.time_ms, window_ms, run_ms, went.hidden_work)
        if inspected.after != prints:
            raise _Stop(Status.INCORRECT, f"{step}: forward() modified its inputs in place")
        cmp = compare(out, truth, self.task.tolerance.atol, self.task.tolerance.rtol)
        if not cmp.passed:
            raise _Stop(Status.INCORRECT, f"timed call {index} returned a wrong result ({cmp.message}): results must "
                        "be computed on every call from that call's inputs, not cached, deferred or estimated")
        if inspected.peak_memory_bytes is not None:
            self.peak_memory = max(self.peak_memory or 0, inspected.peak_memory_bytes)
        return TimedCall(distribution, went.time_ms, window_ms, run_ms, went.hidden_work)


def _failure_verdict(failure: ChildFailure, step: str) -> tuple[Status, str]:
    tail = "\n".join(failure.stderr.strip().splitlines()[-15:])
    suffix = f"\nlast output:\n{tail}" if tail else ""
    if failure.kind == "timeout":
        return Status.TIMEOUT, f"{step} did not finish: {failure}{suffix}"
    if failure.kind == "protocol":
        return Status.TAMPER_DETECTED, f"{step}: {failure}"
    if failure.oom:
        # A runaway allocation that timed out says how much it grew (supervisor.py); a hard kill says so.
        what = str(failure) if failure.kind == "oom" and "while" in str(failure) else "was killed"
        return Status.RUNTIME_ERROR, f"{step}: exceeded the sandbox memory limit: {what}{suffix}"
    if failure.kind == "exited" and failure.returncode == 0:
        return Status.TAMPER_DETECTED, (f"{step}: the process exited cleanly in the middle of judging "
                                        f"(sys.exit/os._exit from candidate code){suffix}")
    if failure.signal_name:
        return Status.RUNTIME_ERROR, f"{step}: the process crashed ({failure.signal_name}){suffix}"
    return Status.RUNTIME_ERROR, f"{step}: the process exited with code {failure.returncode}{suffix}"


def execute(prepared: PreparedCandidate, device: str, *, config: JudgeConfig | None = None) -> Verdict:
    """Run the prepared candidate in an isolated child on `device`: correctness trials, then timing."""
    config = config or JudgeConfig()
    task = get_task(prepared.task_id)
    is_cuda = torch.device(device).type == "cuda"
    run = Execution(task, device, config, task.official_shape if is_cuda else task.cpu_shape, dict(prepared.stages))
    base = {"task": task.id.value, "device": device, "source_sha256": prepared.source_sha256,
            "toolchain": prepared.toolchain, "imports": prepared.imports, "compile_log": prepared.compile_log}

    # Imported here, so that `python -m sandbox.baseline` runs cleanly.
    from sandbox.baseline import get_baselines

    try:
        with run.stage("baselines"):
            baselines = get_baselines(task.id.value, device, run.shape, config)
    except Exception as exc:  # noqa: BLE001 - our measurement failed: not the candidate's fault
        return Verdict(status=Status.SYSTEM_ERROR, diagnosis=f"baseline measurement failed: {exc}",
                       stages=run.stages, **base)

    runs_root = config.build_root.parent / "runs"
    runs_root.mkdir(parents=True, exist_ok=True)
    work_dir = Path(tempfile.mkdtemp(prefix=f"{prepared.build_key[:12]}-", dir=runs_root))
    # A private copy: what the candidate writes while running cannot change its cached build.
    shutil.copytree(prepared.build_dir, work_dir, dirs_exist_ok=True, symlinks=True)
    fields: dict[str, Any] = {}
    details: dict[str, Any] = {}
    status, diagnosis = Status.CORRECT, ""
    phase = "starting the sandbox"
    held = time.monotonic()
    try:
        with run.stage("start"):
            run.start(work_dir, fields)
        phase = "calibration"
        with run.stage("calibration"):
            run.calibrate()
        phase = "import of the candidate"
        with run.stage("load"):
            run.load()
        phase = "correctness"
        with run.stage("correctness"):
            run.correctness()
        phase = "timing"
        with run.stage("timing"):
            perf, hidden_work = run.timing(baselines, details)
        fields["performance"] = perf
        diagnosis = _summary(perf)
        if hidden_work:
            diagnosis += ("; device work ran where the timing events do not look (another stream or thread), so those "
                          "calls were timed by the host clock between device-wide synchronisations")
        if config.check_extra_shapes:
            phase = "extra shapes"
            with run.stage("extra_shapes"):
                fields["extra_shapes"] = run.extras
                run.extra_shapes(task.extra_shapes if is_cuda else task.cpu_extra_shapes)
            bad = [e for e in run.extras if not e.passed]
            if bad:
                diagnosis += (f"; fails {len(bad)} of {len(run.extras)} extra shapes (reported, not part of the "
                              f"verdict): first {bad[0].shape}: {bad[0].message}")
    except _Stop as stop:
        status, diagnosis, details = stop.status, stop.diagnosis, {**details, **stop.details}
    except ChildFailure as failure:
        status, diagnosis = _failure_verdict(failure, phase)
        details["failure"] = failure.kind
        if not run.candidate_loaded:
            # No candidate code had run yet: the sandbox or the machine failed, not the candidate.
            status = Status.SYSTEM_ERROR
            diagnosis = f"the judge's child failed before loading the candidate: {diagnosis}"
    except isolation.IsolationError as exc:
        status, diagnosis = Status.SYSTEM_ERROR, f"the sandbox could not start: {exc}"
    finally:
        if run.session is not None:
            run.session.close()
        shutil.rmtree(work_dir, ignore_errors=True)
    # What judging this candidate cost: the device is held from the child's start to its end.
    details["cost"] = {"device_held_s": round(time.monotonic() - held, 4), "truth_checks": run.truth_checks,
                       "parent_cpu_s": {k: round(v, 4) for k, v in run.parent_cpu_s.items()}}
    return Verdict(status=status, diagnosis=diagnosis, stages=run.stages, trials=run.trials, details=details,
                   **fields, **base)


def _performance(task: Task, shape: tuple[int, ...], stats: TimingStats, baselines: dict,
                 peak: int | None) -> Performance:
    base_stats = {name: TimingStats(**values) for name, values in baselines.get("baselines", {}).items()}
    bandwidth = baselines.get("bandwidth_bytes_per_s")
    min_bytes = task.min_bytes(shape)
    sol = (min_bytes / bandwidth * 1e3) / stats.median_ms if bandwidth else None
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


def _summary(perf: Performance) -> str:
    stats = perf.candidate
    parts = [f"correct: {stats.median_ms:.4f} ms median (IQR {stats.q25_ms:.4f}-{stats.q75_ms:.4f}, {stats.reps} runs)"]
    parts += [f"{s:.2f}x vs {name}" for name, s in perf.speedups.items()]
    if perf.speed_of_light_fraction is not None:
        parts.append(f"{100 * perf.speed_of_light_fraction:.0f}% of speed-of-light")
    return ", ".join(parts)
