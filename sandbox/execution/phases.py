"""Run one prepared candidate in an isolated child: correctness trials, then timing, as named phases.

`execute` reads top to bottom: start the child, calibrate its clocks, load the candidate, correctness,
timing, extra shapes. Each phase is a method of `Execution`, timed by the one `stage` context manager.
Until `candidate_loaded` is set, no candidate code has run, so a failure of the child is the judge's
(system_error, retried); from then on it is the candidate's.

Nothing is compiled while the device is held: the child loads only what the build stage built (an extension
it would have to build is a compile_error, sandbox/child/no_build.py), and the load has a limit of seconds
(JudgeConfig.load_timeout_s), not the build's minutes.

The timing phase is `TimedPhase`'s (sandbox/execution/timed_phase.py), a base class of `Execution`; the records
the phases pass around (stages, timed calls, calibration) are in sandbox/execution/records.py.
"""

from __future__ import annotations

import contextlib
import secrets
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ContextManager, TypeVar

import torch

from reference import Task
from reference.task import sharing_targets
from sandbox import isolation
from sandbox.execution import cputime
from sandbox.execution import tracing
from sandbox.execution.making import made_on_device
from sandbox import protocol as msg
from sandbox.shared.compare import compare, dtype_name, fingerprint, tensor_from_bytes
from sandbox.config import JudgeConfig
from sandbox.environment import describe
from sandbox.supervisor import ChildFailure, ChildResult, ChildSession
from sandbox.stages import timed
from sandbox.execution.spares import WarmChild
from sandbox.execution.records import READY_TIMEOUT_S, Calibration, CallTruth, Stage, TimedCall, _Stop
from sandbox.execution.timed_phase import TimedPhase
from sandbox.verdict import Status, TrialResult

CLOCK_CALIBRATION_REPS = 50
"""Empty calls the child times to learn its clocks' own overhead (synchronise + timestamp)."""
EMPTY_CALLS = 10
"""Timed round trips of an empty batch before the candidate is loaded: what a round trip costs the parent's
clock beyond the calls themselves (the timing bound subtracts it). On the CPU: a loaded host's round trips vary."""
GPU_EMPTY_CALLS = 4
"""The same on a GPU, where an empty batch's round trip varies by a few per cent (H200, 2026-11-28) but costs the
device what a real batch's making does (kl_div: its lead and three sets of inputs, ~35 ms): ten of them made a
spare's calibration 0.5 s, which the next candidate's timing stage waited for (the device gate), 0.5 s of its hold."""

R = TypeVar("R", bound=msg.Reply)
T = TypeVar("T")


@dataclass
class Execution(TimedPhase):
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
    spare's set-up out of this candidate's stages as far as each needs (sandbox/execution/device_gate.py)."""
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
    own_makings: list[tuple[str, float]] = field(default_factory=list)
    """CPU: every call's making the parent measured beside this candidate's batches (warm-up, both timings, the
    forward alone), as (distribution, ms): with the calibration's, what `call_runs` caps each making by."""

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

    def calibrate(self, step: Callable[[], ContextManager[object]] = contextlib.nullcontext) -> None:
        """Before the candidate exists: the clocks' overhead, what making a timed call's inputs costs the child (which
        sizes the lead before each call), and what an empty timed round trip costs. Each request to the child (the
        clocks' calibration, one empty batch) runs inside its own `step()`: a spare calibrating ahead passes its device
        gate per step as a calibrating one (sandbox/execution/warm.py), so a candidate's stage that asks meanwhile goes
        between two of them; each measurement runs with no candidate's stage beside it."""
        if self.warm is not None and self.warm.calibration is not None:
            # Measured by this method on this child before any candidate existed (sandbox/execution/warm.py).
            self.calibration = self.warm.calibration
            return
        with step():
            clock, _ = self.ask(msg.Calibrate(reps=CLOCK_CALIBRATION_REPS, shape=list(self.shape),
                                              distributions=list(self.timing_distributions())),
                                msg.CalibrateReply, "calibration", READY_TIMEOUT_S)
        assert isinstance(clock, msg.CalibrateReply)
        pool, size = self.timing_distributions(), self.batch_size()
        count = GPU_EMPTY_CALLS if self.is_cuda else EMPTY_CALLS
        empty = []
        for i in range(count):
            with step():
                empty.append(self.timed_batch(i, self.draw(pool, size), empty=True))
        self.calibration = Calibration(empty_calls=tuple(empty), flush_ms=clock.flush_ms, lead_ms=clock.lead_ms,
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

    trial_reply = msg.TrialReply  # (a class attribute, not a dataclass field: no annotation)
    modified_inputs = "forward() modified its inputs in place"
    output_name = ""
    """What a failed output comparison's message is prefixed with (a training step's output is its loss)."""

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



