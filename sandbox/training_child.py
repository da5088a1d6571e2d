"""The training variants inside the isolated child: forward + backward, and the gradient handed back as bytes.

Untrusted process, same THREAT MODEL as sandbox/child.py (read it first): nothing here decides a verdict.
`TrainingChild` extends `Child` for tasks with `task.training` set:

- a step is `loss = ModelNew(predictions, targets)` with `predictions.requires_grad`, then
  `torch.autograd.backward(loss, scale)` (bound at import, before the candidate exists), `scale` from the
  call's seed (reference/training.py); the step is one timed call, as training pays it;
- the gradient the step leaves in `predictions.grad` is checked here for what bytes cannot show: a plain
  `torch.Tensor`, on the inputs' device, strided, sharing no memory with an input, with the loss, or with
  the previous step's gradient (which this process holds until the next step, so the allocator cannot hand
  its memory to an honest new gradient: an overlap is a recycled tensor);
- after the step, and only then, the parent sends `grad_check` with a fresh weight seed and row sample: the
  child returns every row of the gradient projected on those weights (fp64) and the sampled rows' raw
  fp32 bytes. The parent compares both with its own fp64 truth (sandbox/training.py);
- the trial records the evidence of candidate-built code in the backward alone (the profiler and
  `sys.setprofile`, as the forward does) and whether the loss's graph holds a custom autograd.Function;
- the operators this module runs outside a step (projection, row gather) are recorded before the import
  and their dispatcher tables watched (`harness_operators(also=...)`), and this module is watched by
  `Integrity` like the rest of the harness.
"""

from __future__ import annotations

import sys
import types
from typing import Any, Callable

import torch

from reference.task import generator, row_chunks
from reference.training import grad_output_scale
from sandbox import compare as _compare
from sandbox import protocol as _protocol
from sandbox import timing as _timing


def _running_child_module() -> types.ModuleType:
    """The harness module that serves this process. `python -m sandbox.child` runs it as `__main__`; importing
    `sandbox.child` again would make a second copy (another OutputRejected class, which its serve loop would
    not catch, and objects Integrity does not watch). Elsewhere (the parent, tests) the ordinary module."""
    main = sys.modules.get("__main__")
    spec = getattr(main, "__spec__", None)
    if spec is not None and spec.name == "sandbox.child":
        return main
    from sandbox import child

    return child


_child = _running_child_module()

_autograd_backward = torch.autograd.backward
_BackwardCFunction = torch.autograd.function.BackwardCFunction
GRAPH_WALK_LIMIT = 10_000
"""Autograd nodes visited when looking for a custom Function: the losses here have a handful."""


# --- shared with the parent (pure functions: same results in both processes) ------------------------

def projection_weights(cols: int, seed: int, device: torch.device) -> torch.Tensor:
    """fp64 weights uniform in [-1, 1), one per column, from a seed: bit-identical in parent and child."""
    return torch.rand(cols, generator=generator(seed, device), dtype=torch.float64, device=device).mul_(2.0).sub_(1.0)


def project_rows(matrix: torch.Tensor, weights: torch.Tensor) -> torch.Tensor:
    """matrix @ weights in fp64, over row chunks (bounds the fp64 copy of a 1 GiB gradient to 128 MiB)."""
    rows, cols = matrix.shape
    chunks = row_chunks(rows, cols)
    return torch.cat([torch.mv(matrix[s:s + chunks.step].double(), weights) for s in chunks]) if rows else \
        torch.zeros(0, dtype=torch.float64, device=matrix.device)


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
    """A `Child` whose calls are training steps. Message flow per timed step: arm, go, grad_check, inspect.

    `trial`, `estimate`, `arm`, `go` and `inspect` are its own (Child's serve the forward tasks); the empty
    calls of the calibration (`null`) are Child's."""

    def __init__(self, task_id: str, device: str, source_path: str, res_fd: int) -> None:
        super().__init__(task_id, device, source_path, res_fd)
        assert self.task.training is not None
        self.grad_input = self.task.training.grad_input
        self.grad: torch.Tensor | None = None
        """The last step's gradient, until the parent has checked it and the next step starts."""
        self.previous_grad: torch.Tensor | None = None
        """The step before's gradient, kept alive so that its memory cannot be an honest new gradient's."""
        self.scale: torch.Tensor | None = None
        self.mode = "step"
        self.step_armed: tuple[Any, list[torch.Tensor]] | None = None
        self.step_peak: int | None = None
        # Watch this module too, and the operators the gradient check runs (recorded before the import).
        self.integrity = _child.Integrity([_timing, _protocol, _compare, _child, sys.modules[__name__]],
                                          _child.harness_operators(self.task, self.device, also=self._probe))

    def _probe(self) -> None:
        """What `grad_check` and `arm` run besides the task's own harness, on a small gradient."""
        grad = torch.rand(8, 64, device=self.device)
        project_rows(grad, projection_weights(64, 0, self.device)).cpu()
        grad[torch.tensor([0, 3], dtype=torch.int64, device=self.device)].contiguous().cpu()
        torch.tensor(1.5, dtype=torch.float32, device=self.device)

    def _scale(self, seed: int) -> torch.Tensor:
        return torch.tensor(grad_output_scale(seed), dtype=torch.float32, device=self.device)

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

    def _take_grad(self, inputs: list[torch.Tensor], loss: torch.Tensor) -> torch.Tensor:
        """predictions.grad after the step, refused unless it is a fresh plain tensor beside the inputs."""
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
        others = [(f"input {i}", t) for i, t in enumerate(inputs)] + [("the loss", loss)]
        if self.previous_grad is not None:
            others.append(("the previous call's gradient (a recycled gradient)", self.previous_grad))
        for name, other in others:
            o_lo, o_hi = _child._storage_span(other)
            if lo < o_hi and o_lo < hi:
                raise _child.OutputRejected(f"predictions.grad shares memory with {name}")
        return grad

    def _begin_step(self) -> None:
        """The last gradient becomes the previous one (kept alive); the next step makes a new one."""
        self.previous_grad, self.grad = self.grad, None

    # --- commands ---------------------------------------------------------------------------------

    def _profiled(self, fn: Callable[[], Any]) -> tuple[Any, set[str], set[str]]:
        """fn() under the profiler and sys.setprofile: (result, calls into built extensions, event names)."""
        calls: set[str] = set()
        modules = self.extension_modules

        def watch(frame: Any, event: str, arg: Any) -> None:
            if event == "c_call" and getattr(arg, "__module__", None) in modules:
                calls.add(f"{arg.__module__}.{getattr(arg, '__name__', '?')}")

        activities = [torch.profiler.ProfilerActivity.CPU]
        if self.device.type == "cuda":
            activities.append(torch.profiler.ProfilerActivity.CUDA)
        with torch.profiler.profile(activities=activities) as prof:
            sys.setprofile(watch)
            try:
                result = fn()
            finally:
                sys.setprofile(None)
            self.clock.synchronize()
        return result, calls, {evt.name for evt in prof.events()}

    def _evidence(self, calls: set[str], names: set[str]) -> tuple[list[str], list[str], list[str]]:
        ops = sorted(n for n in names
                     if _child._CUSTOM_OP.fullmatch(n) and n.split("::")[0] not in _child._TORCH_NAMESPACES)
        kernels = sorted(n for n in names if any(k in n for k in self.kernel_names))
        return sorted(calls), ops, kernels[:20]

    def trial(self, cmd: _protocol.Trial) -> tuple[dict[str, Any], list[bytes]]:
        inputs = self._inputs(cmd)
        before = _compare.fingerprint(inputs)
        inputs[self.grad_input].requires_grad_(True)
        scale = self._scale(cmd.seed)
        self._begin_step()
        loss, f_calls, f_names = self._profiled(lambda: self.model(*inputs))
        self._check_loss(loss)
        custom_function = has_custom_function(loss)
        _, b_calls, b_names = self._profiled(lambda: _autograd_backward([loss], [scale]))
        meta, payload = self._output_payload(loss, inputs)
        self.grad = self._take_grad(inputs, loss)
        after = _compare.fingerprint(inputs)
        calls, ops, kernels = self._evidence(f_calls | b_calls, f_names | b_names)
        b_calls_, b_ops, b_kernels = self._evidence(b_calls, b_names)
        meta.update(before=before, after=after, custom_calls=calls, custom_ops=ops, custom_kernels=kernels,
                    backward_custom_calls=b_calls_, backward_custom_ops=b_ops, backward_custom_kernels=b_kernels,
                    custom_function=custom_function)
        return meta, [payload]

    def estimate(self, cmd: _protocol.Estimate) -> dict[str, Any]:
        inputs = self._inputs(cmd)
        leaf = inputs[self.grad_input].requires_grad_(True)
        scale = self._scale(cmd.seed)

        def step() -> torch.Tensor:
            leaf.grad = None
            return self._step(self.model, inputs, scale)

        times = _timing.time_calls(self.clock, step, reps=3, warmup=1)
        return {"estimate_ms": sorted(times.times_ms)[1]}

    # One timed step is armed, run and inspected alone (never in a batch): the gradient check sits between
    # `go` and `inspect`. These three do not build on Child's, which may arm batches of forward calls.
    def arm(self, cmd: _protocol.Arm) -> dict[str, Any]:
        if cmd.null:
            self.mode = "null"
            return super().arm(cmd)
        if getattr(cmd, "more", None):
            raise RuntimeError("a training task's timed steps are armed one at a time")
        if self.model is None:
            raise RuntimeError("arm before load")
        self.mode = "forward" if cmd.forward_only else "step"
        self.scale = self._scale(cmd.seed)
        if self.mode == "step":
            self._begin_step()
        inputs = self._inputs(cmd)
        before = _compare.fingerprint(inputs)
        inputs[self.grad_input].requires_grad_(True)
        if self.device.type == "cpu":
            self.clock.flush()  # here, outside the parent's window; on a GPU `go` queues it before the call
        self.clock.synchronize()
        if self.device.type == "cuda":
            self.base_memory = torch.cuda.memory_allocated(self.device)
            torch.cuda.reset_peak_memory_stats(self.device)
        self.step_armed = (self.model, inputs)
        return {"before": before}

    def go(self, cmd: _protocol.Go) -> tuple[dict[str, Any], list[bytes]]:
        if self.mode == "null":
            return super().go(cmd)
        if self.step_armed is None:
            raise RuntimeError("go without arm")
        model, inputs = self.step_armed
        scale = self.scale
        if self.mode == "forward":
            call = _timing.time_one_call(self.clock, lambda: model(*inputs), cpu_flushed=True)
        else:
            call = _timing.time_one_call(self.clock, lambda: self._step(model, inputs, scale), cpu_flushed=True)
        # The step's peak now, before grad_check allocates anything of the judge's.
        self.step_peak = (torch.cuda.max_memory_allocated(self.device) - self.base_memory
                          if self.device.type == "cuda" else None)
        meta, payload = self._output_payload(call.result, inputs)
        if self.mode == "step":
            self.grad = self._take_grad(inputs, call.result)
        meta.update(time_ms=call.time_ms, event_ms=call.event_ms, host_ms=call.host_ms, hidden_work=call.hidden_work)
        return meta, [payload]

    def inspect(self, cmd: _protocol.Inspect) -> dict[str, Any]:
        if self.mode == "null":
            return super().inspect(cmd)
        if self.step_armed is None:
            raise RuntimeError("inspect without arm")
        _, inputs = self.step_armed
        self.step_armed = None
        return {"after": _compare.fingerprint(inputs), "peak_memory_bytes": self.step_peak}

    def grad_check(self, cmd: _protocol.GradCheck) -> tuple[dict[str, Any], list[bytes]]:
        """The last step's gradient: every row projected on fresh weights (fp64), and the sampled rows' bytes."""
        grad = self.grad
        if grad is None:
            raise RuntimeError("grad_check without a step")
        meta = {"dtype": _compare.dtype_name(grad.dtype), "shape": list(grad.shape)}
        if grad.dim() != 2 or not grad.is_floating_point():
            return meta, []  # the parent refuses the shape or dtype before reading any payload
        grad = grad.detach()
        projections = project_rows(grad, projection_weights(grad.shape[1], cmd.weight_seed, self.device))
        index = torch.tensor(cmd.rows, dtype=torch.int64, device=self.device)
        rows = grad[index].contiguous().cpu()
        return meta, [projections.cpu().numpy().tobytes(), rows.view(-1).view(torch.uint8).numpy().tobytes()]
