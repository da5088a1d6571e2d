"""The training variants inside the isolated child: forward + backward, and the gradient handed back as bytes.

Untrusted process, same THREAT MODEL as sandbox/child/harness.py (read it first): nothing here decides a verdict.
`TrainingChild` extends `Child` for tasks with `task.training` set:

- a step is `loss = ModelNew(predictions, targets)` with `predictions.requires_grad`, then
  `torch.autograd.backward(loss, scale)` (bound at import, before the candidate exists), `scale` from the
  call's seed (reference/training.py); the step is one timed call, as training pays it, and steps are timed
  in batches like forward calls (each its own inputs and scale);
- the gradient each step leaves in `predictions.grad` is checked here for what bytes cannot show: a plain
  `torch.Tensor`, on the inputs' device, strided, sharing no memory with an input or loss of its batch, with
  another step's gradient, or with the previous batch's gradients (which this process holds until the next
  batch, so the allocator cannot hand their memory to an honest new gradient: an overlap is a recycled tensor);
- after the batch, and only then, the parent sends `grad_check` for each step with a fresh weight seed and row
  sample: the child returns every row of that gradient projected on those weights (fp64) and the sampled
  rows' raw fp32 bytes. The parent compares both with its own fp64 truth (sandbox/execution/training.py);
- the trial records the evidence of candidate-built code in the backward alone (the profiler and
  `sys.setprofile`, as the forward does) and whether the loss's graph holds a custom autograd.Function;
- the operators this module runs outside a step (projection, row gather) are recorded before the import
  and their dispatcher tables watched (`harness_operators(also=...)`), and this module is watched by
  `Integrity` like the rest of the harness;
- a gradient finished after the batch's last event (the gradient pass deferred to an allocator callback, or left
  on a stream nobody waited for) is caught by digests of sampled rows kept inside the window
  (sandbox/child/window.py),
  which `grad_check` computes again on the gradient it reports.
"""

from __future__ import annotations

import sys
import types
from typing import Any, Callable

import torch

from reference.task import TaskId
from reference.training import grad_output_scale
from sandbox.shared import compare as _compare
from sandbox import protocol as _protocol
from sandbox.child import harness as _child
from sandbox.child import timing as _timing
from sandbox.child import window as _window
from sandbox.shared import projection as _projection



_autograd_backward = torch.autograd.backward
_BackwardCFunction = torch.autograd.function.BackwardCFunction
GRAPH_WALK_LIMIT = 10_000
"""Autograd nodes visited when looking for a custom Function: the losses here have a handful."""


def has_custom_function(loss: torch.Tensor) -> bool:
    """Whether the loss's autograd graph holds a node of a custom torch.autograd.Function."""
    seen, todo = set(), [loss.grad_fn]
    while todo and len(seen) < GRAPH_WALK_LIMIT:
        node = todo.pop()
        if node is None or id(node) in seen:
            continue
        seen.add(id(node))
        if isinstance(node, _BackwardCFunction):
            return True
        todo.extend(fn for fn, _ in node.next_functions)
    return False


# --- the child -------------------------------------------------------------------------------------------

class TrainingChild(_child.Child):
    """A `Child` whose calls are training steps. Message flow per timed batch: arm, go, grad_check per step,
    inspect.

    `trial`, `estimate`, `arm`, `go` and `inspect` are its own (Child's serve the forward tasks); the empty
    calls of the calibration (`null`) are Child's."""

    SEALED = (*_child.Child.SEALED, "grad_input")

    def __init__(self, task_id: TaskId, device: str, source_path: str, res_fd: int) -> None:
        super().__init__(task_id, device, source_path, res_fd)
        assert self.task.training is not None
        self.grad_input = self.task.training.grad_input
        self.grads: list[torch.Tensor] = []
        """The last trial's or batch's gradients, one per step, until the parent has checked them."""
        self.previous_grads: list[torch.Tensor] = []
        """The ones before, kept alive so that their memory cannot be an honest new gradient's."""
        self.step_kept: tuple[_window.Kept, ...] = ()
        """What the last batch's steps left inside the window: digests of sampled rows of each gradient."""

    def _watched_modules(self) -> list[types.ModuleType]:
        return [*super()._watched_modules(), _projection, sys.modules[__name__]]

    def _harness_probe(self) -> None:
        """What `grad_check`, `arm` and a step's window run besides the task's own harness, on a small gradient."""
        grad = torch.rand(8, 64, device=self.device)
        _projection.project_rows(grad, _projection.projection_weights(64, 0, self.device)).cpu()
        grad[torch.tensor([0, 3], dtype=torch.int64, device=self.device)].contiguous().cpu()
        torch.tensor(1.5, dtype=torch.float32, device=self.device)
        leaf = torch.rand(8, 64, device=self.device)
        leaf.grad = grad
        keeper = _window.Keeper(self.device, self.task.output_shape, self.task.output_dtype, 1,
                                (0, tuple(leaf.shape), leaf.dtype))
        keeper.take(0, torch.zeros((), device=self.device), [leaf])
        _window.gradient_changed_after(grad, keeper.close()[0], 0)

    def _scale(self, seed: int) -> torch.Tensor:
        """The step's incoming gradient, filled on the device (a copy from the host would wait for the device in the
        middle of a batch: `torch.tensor(..., device=...)` is a synchronous transfer)."""
        return torch.full((), grad_output_scale(seed), dtype=torch.float32, device=self.device)

    def _leaf(self, shape: tuple[int, ...]) -> tuple[int, tuple[int, ...], torch.dtype] | None:
        return (self.grad_input, shape, torch.float32) if shape else None

    # --- one step ---------------------------------------------------------------------------------

    def _step(self, model: Callable[..., Any], inputs: list[torch.Tensor], scale: torch.Tensor) -> torch.Tensor:
        """Forward, then backward of the loss with `scale` as its incoming gradient: what training pays."""
        loss = model(*inputs)
        self._check_loss(loss)
        _autograd_backward([loss], [scale])
        return loss

    def _check_loss(self, loss: Any) -> None:
        if type(loss) is not torch.Tensor:
            raise _child.OutputRejected(f"forward returned {type(loss).__module__}.{type(loss).__qualname__}, "
                                        "not a plain torch.Tensor")
        if not loss.requires_grad:
            raise _child.OutputRejected("the loss does not require grad: loss.backward() cannot reach predictions "
                                        "(return the loss from a torch.autograd.Function, or from differentiable code)")
        if tuple(loss.shape) != ():
            raise _child.OutputRejected(f"the loss has shape {list(loss.shape)}, expected a scalar (shape [])")

    def _take_grad(self, inputs: list[torch.Tensor], losses: list[torch.Tensor],
                   batch_inputs: list[torch.Tensor]) -> torch.Tensor:
        """predictions.grad after the step, refused unless it is a fresh plain tensor: sharing no memory with any
        input or loss of its batch, with another step's gradient, or with the previous batch's (recycled)."""
        leaf = inputs[self.grad_input]
        grad = leaf.grad
        if grad is None:
            raise _child.OutputRejected("loss.backward() left predictions.grad None: no gradient reached predictions")
        if type(grad) is not torch.Tensor:
            raise _child.OutputRejected(f"predictions.grad is a {type(grad).__module__}.{type(grad).__qualname__}, "
                                        "not a plain torch.Tensor")
        if grad.device != leaf.device:
            raise _child.OutputRejected(f"predictions.grad is on {grad.device}, predictions on {leaf.device}")
        if grad.layout != torch.strided:
            raise _child.OutputRejected(f"predictions.grad has layout {grad.layout}, expected torch.strided")
        lo, hi = _child._storage_span(grad)
        others = [(f"input {i}", t) for i, t in enumerate(batch_inputs)] + [("a loss", loss) for loss in losses]
        others += [("the gradient of another step in its batch (a recycled gradient)", g) for g in self.grads]
        others += [("a gradient of the previous batch (a recycled gradient)", g) for g in self.previous_grads]
        for name, other in others:
            o_lo, o_hi = _child._storage_span(other)
            if lo < o_hi and o_lo < hi:
                raise _child.OutputRejected(f"predictions.grad shares memory with {name}")
        return grad

    def _begin_step(self) -> None:
        """The last gradients become the previous ones (kept alive); the next steps make new ones."""
        self.previous_grads, self.grads = self.grads, []

    # --- commands ---------------------------------------------------------------------------------

    def trial(self, cmd: _protocol.Trial) -> tuple[_protocol.TrainTrialReply, list[bytes]]:
        inputs = self._inputs(cmd)
        before = _compare.fingerprint(inputs)
        inputs[self.grad_input].requires_grad_(True)
        scale = self._scale(cmd.seed)
        self._begin_step()
        self.step_kept = ()
        loss, f_calls, f_names = self._profiled(lambda: self.model(*inputs))
        self._check_loss(loss)
        custom_function = has_custom_function(loss)
        _, b_calls, b_names = self._profiled(lambda: _autograd_backward([loss], [scale]))
        meta, payload = self._output_payload(loss, inputs)
        self.grads.append(self._take_grad(inputs, [loss], inputs))
        after = _compare.fingerprint(inputs)
        calls, ops, kernels = self._evidence(f_calls | b_calls, f_names | b_names)
        b_calls_, b_ops, b_kernels = self._evidence(b_calls, b_names)
        return _protocol.TrainTrialReply.success(
            **meta, before=before, after=after, custom_calls=calls, custom_ops=ops, custom_kernels=kernels,
            backward_custom_calls=b_calls_, backward_custom_ops=b_ops, backward_custom_kernels=b_kernels,
            custom_function=custom_function), [payload]

    def estimate(self, cmd: _protocol.Estimate) -> _protocol.EstimateReply:
        inputs = self._inputs(cmd)
        leaf = inputs[self.grad_input].requires_grad_(True)
        scale = self._scale(cmd.seed)

        def step() -> torch.Tensor:
            leaf.grad = None
            return self._step(self.model, inputs, scale)

        times = _timing.time_calls(self.clock, step, reps=3, warmup=1)
        return _protocol.EstimateReply.success(estimate_ms=sorted(times.times_ms)[1])

    # A timed batch of steps (or of forwards alone): `arm` prepares the window's buffers, `go` makes each step's inputs
    # and incoming gradient and runs the steps back to back (sandbox/child/timing.py, `time_batch`), keeping every
    # step's gradient; `grad_check` reports one of them (the parent asks for each in turn), `inspect` fingerprints the
    # inputs.
    def arm(self, cmd: _protocol.Arm) -> _protocol.ArmReply:
        reply = super().arm(cmd)
        if not cmd.null and not cmd.forward_only:
            self._begin_step()
        return reply

    def go(self, cmd: _protocol.Go) -> tuple[_protocol.GoReply, list[bytes]]:
        if self.armed is not None and self.armed.null:
            return super().go(cmd)
        armed = self._take_armed(cmd)
        model, shape = self.model, tuple(cmd.shape)
        # Plain closures, as in Child.go: nothing the candidate could have patched runs between here and the clock.
        if armed.forward_only:
            run = lambda inputs, m=model: m(*inputs[:-1])  # noqa: E731 - a plain closure (see above)
        else:
            run = lambda inputs, m=model: self._step(m, inputs[:-1], inputs[-1])  # noqa: E731
        calls = [_timing.Call(self._step_maker(shape, c.distribution, c.seed), run) for c in cmd.calls]
        batch = _timing.time_batch(self.clock, calls, keep=armed.keeper, marks=self.marks(model), memory=self.memory)
        return self._after_steps(batch, armed)

    def _step_maker(self, shape: tuple[int, ...], distribution: str, seed: int) -> Callable[[], list[torch.Tensor]]:
        """A step's inputs (its leaf requiring grad) and, last, its incoming gradient: made inside the batch."""
        make, device, grad_input, scale = self.task.make_inputs, self.device, self.grad_input, self._scale

        def inputs() -> list[torch.Tensor]:
            made = make(shape, distribution, seed, device)
            made[grad_input].requires_grad_(True)
            return [*made, scale(seed)]

        return inputs

    def _after_steps(self, batch: _timing.BatchTime, armed: _child.Armed) -> tuple[dict[str, Any], list[bytes]]:
        """`go`'s work after the window: the outputs and what was kept, each step's gradient taken."""
        self._after_window(batch, armed.keeper)
        self.step_kept = batch.kept
        self.peak = batch.peak
        sets = [inputs[:-1] for inputs in batch.inputs]  # the incoming gradients are the judge's, not inputs
        self.ran = sets
        reply = self._batch_reply(batch, sets)
        if not armed.forward_only:
            everything = [t for inputs in sets for t in inputs]
            losses = list(batch.results)
            for inputs in sets:
                self.grads.append(self._take_grad(inputs, losses, everything))
        return reply

    def grad_check(self, cmd: _protocol.GradCheck) -> tuple[_protocol.GradCheckReply, list[bytes]]:
        """The last step's gradient: every row projected on fresh weights (fp64), and the sampled rows' bytes."""
        if cmd.call >= len(self.grads):
            raise RuntimeError(f"grad_check of step {cmd.call}: the last batch left {len(self.grads)} gradient(s)")
        grad = self.grads[cmd.call]
        if cmd.call < len(self.step_kept):
            self.clock.synchronize()
            late = _window.gradient_changed_after(grad, self.step_kept[cmd.call], cmd.call)
            self.findings.extend([late] if late else [])
        reply = _protocol.GradCheckReply.success(dtype=_compare.dtype_name(grad.dtype), shape=list(grad.shape))
        if grad.dim() != 2 or not grad.is_floating_point():
            return reply, []  # the parent refuses the shape or dtype before reading any payload
        grad = grad.detach()
        weights = _projection.projection_weights(grad.shape[1], cmd.weight_seed, self.device)
        projections = _projection.project_rows(grad, weights)
        index = torch.tensor(cmd.rows, dtype=torch.int64, device=self.device)
        rows = grad[index].contiguous().cpu()
        return reply, [projections.cpu().numpy().tobytes(), rows.view(-1).view(torch.uint8).numpy().tobytes()]
