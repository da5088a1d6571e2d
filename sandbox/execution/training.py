"""The training variants in the trusted parent: gradients checked against fp64 truth, the step timed, baselines.

For tasks with `task.training` set (kl_div_train, cross_entropy_train; reference/training.py). The child
side is sandbox/child/training.py. What changes from the forward judge (sandbox/execution/phases.py), and why:

- Each trial and each timed step is forward + backward on fresh seeded inputs, with an incoming gradient
  `scale` from the seed. The loss is checked as for the forward task; then, and only after the step ran,
  the parent draws a weight seed and a row sample with `secrets` and asks the child for the gradient
  (`grad_check`). Every row is checked through its projection on the fresh weights: for each row r,
  |sum_j w_j (g_rj - t_rj)| <= sum_j |w_j| (atol + rtol |t_rj|), which any gradient within the elementwise
  tolerance satisfies, so no honest kernel can fail it, while a wrong row (a zero, sub-sampled, cached or
  unscaled gradient) fails it unless its errors happen to cancel against weights it never saw. The sampled
  rows (all of them at CPU sizes, `GRAD_SAMPLE_BYTES` worth at official sizes) are compared elementwise.
  Both in per-row units, batch * gradient / scale (reference/training.py says why).
- The candidate's gradient must come from its own code: the backward ran code it built, or the loss's
  graph holds a custom autograd.Function (a fused forward whose backward only scales the saved gradient).
  Forbidden operators (forward ones and their backward operators) are tripwires in backward as in forward.
- Timing: the step (forward + backward) is the score, timed exactly as forward calls are (batches of steps,
  a fresh seed per step, every step's loss and gradient checked after its batch); the forward alone is timed
  after it the same way (every loss checked) and reported in `details["training"]`. Peak device memory is
  a step's: the batch's peak less the earlier steps' gradients, which the judge keeps for checking.
- Baselines: eager and torch.compile of the same step (and of the forward alone), and Liger-Kernel's fused
  loss as an extra step row where it is installed and agrees with the fp64 truth
  (sandbox/execution/measure_baselines.py, run
  in the trusted baseline subprocess).
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass, field
from typing import Any

import torch

from reference import Task
from reference.task import row_chunks
from reference.training import grad_output_scale
from sandbox.execution import plausibility
from sandbox import protocol as msg
from sandbox.shared.compare import dtype_name, fingerprint, tensor_from_bytes
from sandbox.execution.making import made_on_device
from sandbox.execution.phases import Execution
from sandbox.execution.records import CallTruth, _Stop
from sandbox.execution.timing import ARMED_BYTES, batch_size, summarize
from sandbox.shared.projection import projection_weights
from sandbox.verdict import Status, TimingStats

GRAD_SAMPLE_BYTES = 8 << 20
"""Raw gradient rows read back per checked step: all rows at the CPU sizes (128 KiB), 128 rows of kl_div
(512 of cross_entropy) at the official sizes, where the whole 1 GiB gradient would cost ~1 s per step."""
ALLOCATOR_BLOCK = 512
"""PyTorch's CUDA caching allocator rounds every allocation up to a multiple of 512 bytes."""
PROJECTION_SLACK = 1e-9
"""Relative fp64 rounding allowed in a row projection beyond the tolerance (the sums' error is ~1e-13)."""


def training_armed_bytes(total_memory: int) -> int:
    """Device memory a batch of training steps may hold: a third of the card, at least the forward's budget.
    A step holds twice a forward call's bytes; under the forward's 8 GiB, kl_div_train got one step per batch,
    so each step's own host work (fresh 1 GiB gradients, the kept ones) fell into the batch's timed window and
    made an honest kernel look like hidden work once (H100, 2026-11-23). A third of an 80 GB card is 6 steps,
    leaving room for the candidate's own buffers and the parent's fp64 truth."""
    return max(ARMED_BYTES, total_memory // 3)


@dataclass(frozen=True, kw_only=True)
class GradientTruth:
    """What the parent knows about one step's gradient before asking for it, in per-row units."""

    scale: float
    weight_seed: int
    rows: list[int]
    projections: torch.Tensor
    """fp64 (batch,): each truth row projected on the weights."""
    bounds: torch.Tensor
    """fp64 (batch,): sum_j |w_j| (atol + rtol |t_rj|) + rounding slack, per row."""
    sampled: torch.Tensor
    """fp64 (len(rows), cols): the truth of the sampled rows."""
    magnitudes: torch.Tensor
    """fp64 (len(rows), cols): what rtol applies to in the sampled rows (Training.gradient_magnitude)."""


@dataclass(frozen=True, kw_only=True)
class GradientResult:
    passed: bool
    message: str | None = None
    max_abs_error: float | None = None
    max_rel_error: float | None = None


def sample_rows(rows: int, cols: int) -> list[int]:
    """Every row where the gradient is small, else a fresh random sample worth GRAD_SAMPLE_BYTES."""
    if rows * cols * 4 <= GRAD_SAMPLE_BYTES:
        return list(range(rows))
    k = max(1, GRAD_SAMPLE_BYTES // (cols * 4))
    return sorted(secrets.SystemRandom().sample(range(rows), k))


def gradient_truth(task: Task, inputs: list[torch.Tensor], seed: int) -> GradientTruth:
    """fp64 truth for one step, chunk by chunk on the inputs' device; a fresh weight seed and row sample."""
    spec = task.training
    rows, cols = inputs[spec.grad_input].shape
    device = inputs[spec.grad_input].device
    tol = spec.gradient_tolerance
    weight_seed, sample = secrets.randbits(62), sample_rows(rows, cols)
    weights = projection_weights(cols, weight_seed, device)
    wanted = torch.tensor(sample, dtype=torch.int64)
    projections, bounds, sampled, magnitudes = [], [], [], []
    chunks = row_chunks(rows, cols)
    for start in chunks:
        stop = min(rows, start + chunks.step)
        truth = spec.gradient_truth(inputs, start, stop).mul_(rows)
        projections.append(torch.mv(truth, weights))
        magnitude = spec.gradient_magnitude(inputs, start, stop, truth)
        inside = (wanted[(wanted >= start) & (wanted < stop)] - start).to(device)
        if inside.numel():
            sampled.append(truth[inside])
            magnitudes.append(magnitude[inside])
        bounds.append(torch.mv(magnitude * tol.rtol + tol.atol, weights.abs()) +
                      PROJECTION_SLACK * torch.mv(truth.abs_(), weights.abs()))
        del truth, magnitude
    empty = torch.zeros(0, cols, dtype=torch.float64)
    return GradientTruth(scale=grad_output_scale(seed), weight_seed=weight_seed, rows=sample,
                         projections=torch.cat(projections).cpu(), bounds=torch.cat(bounds).cpu(),
                         sampled=torch.cat(sampled).cpu() if sampled else empty,
                         magnitudes=torch.cat(magnitudes).cpu() if magnitudes else empty)


def check_gradient(task: Task, shape: tuple[int, ...], truth: GradientTruth, reply: msg.GradCheckReply,
                   payloads: list[bytes]) -> GradientResult:
    """The child's gradient report against the truth (module doc); ValueError for malformed payloads."""
    rows, cols = shape
    if reply.dtype != dtype_name(torch.float32):
        return GradientResult(passed=False, message=f"predictions.grad has dtype {reply.dtype}, expected float32")
    if list(reply.shape) != [rows, cols]:
        return GradientResult(passed=False,
                              message=f"predictions.grad has shape {reply.shape}, expected {[rows, cols]}")
    if len(payloads) != 2:
        raise ValueError(f"expected 2 gradient payloads, got {len(payloads)}")
    to_rows = rows / truth.scale  # raw gradient -> per-row units
    projections = tensor_from_bytes(payloads[0], "float64", [rows]) * to_rows
    finite = torch.isfinite(projections)
    if not bool(finite.all()):
        bad = int((~finite).nonzero()[0])
        return GradientResult(passed=False,
                              message=f"the gradient has NaN/Inf values in {int((~finite).sum())} row(s); "
                              f"first row {bad}")
    excess = (projections - truth.projections).abs() - truth.bounds
    wrong = (excess > 0).nonzero().flatten()
    if wrong.numel():
        r = int(wrong[0])
        return GradientResult(passed=False, message=(
            f"the gradient is wrong in {wrong.numel()} of {rows} rows (each row checked through a projection on "
            f"random weights drawn after the step): first row {r}, projection {float(projections[r]):.9g}, expected "
            f"{float(truth.projections[r]):.9g} (bound {float(truth.bounds[r]):.3g}); the gradient must be computed on "
            "every step, for every row, from that step's inputs and scaled by the incoming gradient"))
    sampled = tensor_from_bytes(payloads[1], "float32", [len(truth.rows), cols]).double() * to_rows
    tol = task.training.gradient_tolerance
    if not bool(torch.isfinite(sampled).all()):
        return GradientResult(passed=False, message="the gradient has NaN/Inf values")
    error = (sampled - truth.sampled).abs()
    excess = error - (tol.atol + tol.rtol * truth.magnitudes)
    relative = float((error / truth.magnitudes.clamp_min(1e-300)).max()) if error.numel() else 0.0
    worst = float(error.max()) if error.numel() else 0.0
    if error.numel() and bool((excess > 0).any()):
        flat = int(excess.argmax())
        r, c = divmod(flat, cols)
        return GradientResult(passed=False, message=(
            f"the gradient (in per-row units, batch * grad / scale) at row {truth.rows[r]}, column {c}: expected "
            f"{float(truth.sampled[r, c]):.9g}, got {float(sampled[r, c]):.9g}, error {float(error[r, c]):.3g} exceeds "
            f"atol {tol.atol:g} + rtol {tol.rtol:g} * {float(truth.magnitudes[r, c]):.3g}"), max_abs_error=worst,
                              max_rel_error=relative)
    return GradientResult(passed=True, message=None, max_abs_error=worst, max_rel_error=relative)


@dataclass
class TrainingExecution(Execution):
    """`Execution` whose calls are training steps; phases and verdicts as in sandbox/execution/phases.py."""

    forward_only: bool = False
    """Set while the forward alone is timed (after the step)."""
    backward_evidence: set[str] = field(default_factory=set)
    custom_function: bool = False
    gradient_stats: list[dict[str, Any]] = field(default_factory=list)

    def call_truth(self, shape: tuple[int, ...], distribution: str, seed: int, *, timed: bool = False) -> CallTruth:
        """fp64 loss truth, input fingerprints and (unless the forward alone is timed) the gradient's truth; for a
        timed step also the device time of making its inputs (sandbox/execution/making.py)."""
        device = torch.device(self.device)
        make = lambda: self.task.make_inputs(shape, distribution, seed, device)  # noqa: E731
        inputs, make_ms = made_on_device(make, device) if timed else (make(), None)
        loss = self.task.ground_truth(inputs).cpu()
        prints = fingerprint(inputs)
        grad = None if self.forward_only else gradient_truth(self.task, inputs, seed)
        del inputs
        self.truth_checks += 1
        return CallTruth(output=loss, prints=prints, gradient=grad, make_ms=make_ms)

    def check_grad(self, truth: GradientTruth, shape: tuple[int, ...], step: str, call: int = 0) -> GradientResult:
        """Ask for the gradient step `call` of the last trial or batch left (weights and rows only now); check it."""
        reply, raw = self.ask(msg.GradCheck(rows=truth.rows, weight_seed=truth.weight_seed, call=call),
                              msg.GradCheckReply, step, self.config.call_timeout_s)
        try:
            result = check_gradient(self.task, shape, truth, reply, raw.payloads)
        except ValueError as exc:
            raise _Stop(Status.TAMPER_DETECTED, f"{step}: malformed gradient payload: {exc}", rule="protocol") from None
        self.gradient_stats.append({"max_abs_error": result.max_abs_error, "max_rel_error": result.max_rel_error})
        return result

    # --- correctness ------------------------------------------------------------------------------

    # Execution.trial with a training step's differences: the reply carries the backward's evidence too, and a
    # trial whose loss passed is checked for its gradient (`grad_check`, weights and rows drawn only now).
    trial_reply = msg.TrainTrialReply
    modified_inputs = "forward() or backward() modified its inputs in place"
    output_name = "loss: "

    def record_evidence(self, reply: msg.TrialReply) -> None:
        super().record_evidence(reply)
        assert isinstance(reply, msg.TrainTrialReply)
        self.backward_evidence.update(reply.backward_custom_calls, reply.backward_custom_ops,
                                      reply.backward_custom_kernels)
        self.custom_function = self.custom_function or reply.custom_function

    def check_trial(self, step: str, shape: tuple[int, ...], truth: CallTruth) -> str | None:
        grad = self.check_grad(truth.gradient, shape, step)
        return None if grad.passed else grad.message

    def correctness(self) -> None:
        super().correctness()
        if self.task.requires_custom_kernel and not (self.backward_evidence or self.custom_function):
            raise _Stop(Status.POLICY_VIOLATION, "the gradient did not come from the candidate's own code: backward "
                        "ran no code the candidate compiled, and the loss has no custom torch.autograd.Function (write "
                        "a Function whose backward runs your kernel, or whose forward computes the gradient)",
                        rule="custom_backward_required")

    # --- timing -----------------------------------------------------------------------------------

    def timing(self, baselines: dict, details: dict[str, Any]) -> tuple[Any, bool]:
        """The step as the score (Execution.timing: batches, every step's loss and gradient checked), then the
        forward alone in the same batches (every loss checked)."""
        perf, hidden = super().timing(baselines, details)
        size = self.batch_size()
        self.forward_only = True
        try:
            _, timed = self.timed_batches(details["timing"]["planned_calls"], size)
        finally:
            self.forward_only = False
        claims = [b.claim_ms for b in timed]
        device_type = torch.device(self.device).type
        judge = [b.judge_ms for b in timed]
        runs, empty_runs = self.call_runs(timed), self.call_runs(self.empty_calls)
        breach = (plausibility.timing_bound(claims, [b.window_ms for b in timed], runs, empty_runs, device_type,
                                            training=True, empty_windows_ms=[c.window_ms for c in self.empty_calls])
                  or plausibility.unattributed_work([b.excess_ms for b in timed], judge, claims, device_type,
                                                    [b.flushes_ms for b in timed]))
        if breach:
            raise _Stop(Status.TAMPER_DETECTED, f"forward alone: {breach.diagnosis}", rule=breach.rule,
                        **breach.details)
        scale = plausibility.cpu_scale(claims, runs, empty_runs) if device_type == "cpu" else 1.0
        forward = TimingStats(**{**summarize([b.ranked_ms * scale for b in timed]),
                                 "reps": sum(b.calls for b in timed)})
        bandwidth = perf.bandwidth_bytes_per_s
        forward_bytes = self.task.training.forward_min_bytes(self.shape)
        breach = plausibility.speed_of_light(forward.median_ms, forward_bytes, bandwidth,
                                             torch.device(self.device).type)
        if breach:
            raise _Stop(Status.TAMPER_DETECTED, f"forward alone: {breach.diagnosis}", rule=breach.rule,
                        **breach.details)
        forward_baselines = {name: TimingStats(**v) for name, v in baselines.get("forward_baselines", {}).items()}
        details["training"] = {
            "step": "forward + loss.backward(scale), one timed call; performance.candidate is the step",
            "forward": forward.model_dump(),
            "forward_baselines": {k: v.model_dump() for k, v in forward_baselines.items()},
            "forward_speedups": {k: v.median_ms / forward.median_ms for k, v in forward_baselines.items()},
            "forward_min_bytes": forward_bytes,
            "forward_speed_of_light_fraction": (forward_bytes / bandwidth * 1e3) / forward.median_ms if bandwidth
            else None,
            "backward_share": max(0.0, 1.0 - forward.median_ms / perf.candidate.median_ms),
            "gradient_checks": len(self.gradient_stats),
            "gradient_max_rel_error": max((s["max_rel_error"] or 0.0 for s in self.gradient_stats), default=None),
            "backward_runs_candidate_code": bool(self.backward_evidence),
            "custom_autograd_function": self.custom_function,
            "baselines_skipped": baselines.get("skipped", {}),
        }
        return perf, hidden

    def batch_size(self) -> int:
        """Steps per timed batch: what a step keeps alive is its inputs and its gradient, and the child holds the
        previous batch's gradients too (a recycled gradient is refused), so a step counts its inputs and two
        gradients, against a budget of its own (`training_armed_bytes`)."""
        rows, cols = self.shape
        held = self.task.training.forward_min_bytes(self.shape) + 2 * rows * cols * 4
        device = torch.device(self.device)
        if device.type != "cuda":
            return batch_size(device, held)
        return batch_size(device, held, training_armed_bytes(torch.cuda.get_device_properties(device).total_memory))

    # Execution.timed_batch with a training step's differences: the forward alone is armed as such (and has no
    # gradient truth: `call_truth`), and each step's gradient is checked (`grad_check`, weights and rows drawn
    # only now) once its loss has passed.
    def arm_command(self, calls: int, empty: bool) -> msg.Arm:
        arm = super().arm_command(calls, empty)
        return arm.model_copy(update={"forward_only": self.forward_only and not empty})

    def check_timed_call(self, label: str, position: int, truth: CallTruth) -> None:
        if truth.gradient is None:
            return
        grad = self.check_grad(truth.gradient, self.shape, label, call=position)
        if not grad.passed:
            raise _Stop(Status.INCORRECT, f"{label} left a wrong gradient: {grad.message}")

    def record_peak(self, batch_peak: int | None, calls: int) -> None:
        """A step's peak: the batch's, less the gradients of the batch's earlier steps, which the judge keeps alive
        for `grad_check` (an honest step's own peak is what is left). The forward alone records none."""
        if batch_peak is None or self.forward_only:
            return
        rows, cols = self.shape
        kept = (calls - 1) * -(-rows * cols * 4 // ALLOCATOR_BLOCK) * ALLOCATOR_BLOCK
        self.peak_memory = max(self.peak_memory or 0, batch_peak - kept)


def execution_class(task: Task) -> type[Execution]:
    """The one place the kind of a task's execution is chosen: a training task's step (forward and backward,
    its gradient checked too) or a forward. `execute` and a pre-started child's calibration both use it, so a
    spare is calibrated as its candidate will be run."""
    return TrainingExecution if task.training is not None else Execution
