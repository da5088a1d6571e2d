"""The edge of a timed batch's window in the child: what is copied out of each call before the window closes.

Untrusted process, same THREAT MODEL as sandbox/child/harness.py. The attack this answers is deferred work (issue 25):
a candidate whose kernels run after the batch's last event (launched from an allocator trace callback, a gc
callback or a finaliser when the harness next allocates, or still running on a stream nobody waited for)
returns outputs that are wrong when the window closes and right by the time the harness reads them. So the
harness reads them inside the window:

- every call's output is copied into a host buffer made at `arm` (before the batch: no allocation in the window),
  right after the call on the CPU (inside its timed interval), and after the batch's last end event on a GPU (before the
  device-wide synchronisation that ends the host clock); the copies are turned into `bytes` there, so what the
  child reports is fixed before the window closes and nothing run later can change it;
- a training step's gradient (1 GiB for kl_div) is too large to copy in the window: SAMPLED_ROWS of its rows,
  drawn from os.urandom after the step returned, are gathered and reduced on the device to one digest each (the
  sum of their 32-bit words, weighted by random per-column weights drawn at `arm`), and those digests are fixed
  the same way; `grad_check` computes them again on the gradient it reports;
- after the window the child compares every output with what was kept (`changed_after`): a difference means
  the results became right only after the last event, and is tampering.

The copies cost the host a few microseconds inside the window (a GPU batch's: about ten operations queued
together at its end; 4 bytes an output, 512 bytes of digests a training step), which the host clock sees and the
events do not. Copying the sampled rows themselves
(4 MiB a kl_div step) cost ~1 ms of host time a step on an H200 and turned every training batch into hidden work.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import torch

SAMPLED_ROWS = 64
"""Gradient rows checked per training step. A step that leaves a fraction f of its rows for after the window
escapes with probability (1 - f) ** 64 per step: 0.26% for f = 0.09, nil for the whole gradient."""


@dataclass(frozen=True, kw_only=True)
class Kept:
    """What one call left inside the window."""

    output: bytes | None
    """The output's raw bytes; None when it was not a plain tensor of the task's shape, dtype and device (the
    reply path refuses it, or reports it as the wrong shape it is)."""
    rows: tuple[int, ...] = ()
    """A training step's sampled gradient rows (indices), and their digests (int64 bytes, one per row)."""
    row_digests: bytes | None = None
    weights: torch.Tensor | None = None
    """The per-column weights of the digests (int64, on the gradient's device)."""


def row_digests(grad: torch.Tensor, index: torch.Tensor, weights: torch.Tensor, *, gathered: torch.Tensor | None = None,
                product: torch.Tensor | None = None, out: torch.Tensor | None = None) -> torch.Tensor:
    """Per sampled row, the sum of its 32-bit words times `weights` (int64, wrapping): equal digests for equal
    bits. The buffers are given inside the window (nothing allocated there), made afresh outside it."""
    rows = torch.index_select(grad.detach(), 0, index, out=gathered) if gathered is not None else \
        torch.index_select(grad.detach(), 0, index)
    words = rows.view(torch.int32)
    weighted = torch.mul(words, weights, out=product) if product is not None else torch.mul(words, weights)
    return torch.sum(weighted, dim=1, out=out) if out is not None else torch.sum(weighted, dim=1)


def _raw(buffer: torch.Tensor) -> np.ndarray:
    """A numpy view of a host buffer's bytes, made before the window: read later without a torch call."""
    return buffer.view(-1).view(torch.uint8).numpy()


class Keeper:
    """Host buffers for one armed batch, made at `arm`; `take` copies a call's output (and digests of a sample of
    its gradient's rows) into them, `close` returns them as `Kept`, fixed. Implements sandbox/child/timing.py's
    `Keeper`. On a GPU the copies of a whole batch are a handful of operations queued together at `close` (each
    operation costs the host microseconds inside the window; a training batch has up to eight steps)."""

    def __init__(self, device: torch.device, shape: Sequence[int], dtype: torch.dtype, calls: int,
                 leaf: tuple[int, Sequence[int], torch.dtype] | None = None,
                 at_close: Callable[[], list[str]] | None = None) -> None:
        """`leaf`: for training steps, (which input's `.grad` the step fills, that input's shape and dtype); the
        step's inputs come with each `take` (they are made inside the batch). `at_close`: run last inside the
        window (the child's quick hook check); what it returns is `findings`."""
        if device.type == "cuda" and device.index is None:
            device = torch.device("cuda", torch.cuda.current_device())
        self.device, self.shape, self.dtype, self.calls = device, tuple(shape), dtype, calls
        self.at_close = at_close
        self.findings: list[str] = []
        self.cuda = device.type == "cuda"
        pin = self.cuda
        self._outputs_host = torch.empty((calls, *self.shape), dtype=dtype, pin_memory=pin)
        self._outputs = torch.empty((calls, *self.shape), dtype=dtype, device=device) if self.cuda else None
        self._output_raw = _raw(self._outputs_host)
        self._output_bytes = self._outputs_host[0].numel() * self._outputs_host.element_size() if calls else 0
        self._results: list[torch.Tensor | None] = [None] * calls
        self._leaf = leaf
        self._grads: list[torch.Tensor | None] = [None] * calls
        self._sampled: list[tuple[int, ...]] = [()] * calls
        self._frozen: list[Kept | None] = [None] * calls
        if leaf is not None:
            _, (rows, cols), leaf_dtype = leaf
            self._rows = min(SAMPLED_ROWS, rows)
            words = np.frombuffer(os.urandom(4 * cols), dtype=np.uint32) >> np.uint32(1)
            self._weights = torch.from_numpy(words.astype(np.int64)).to(device)
            self._index_host = torch.empty(calls, self._rows, dtype=torch.int64, pin_memory=pin)
            self._index_np = self._index_host.numpy()
            self._index = torch.empty_like(self._index_host, device=device) if self.cuda else self._index_host
            self._gathered = torch.empty(calls, self._rows, cols, dtype=leaf_dtype, device=device)
            self._product = torch.empty(calls, self._rows, cols, dtype=torch.int64, device=device)
            self._digests = torch.empty(calls, self._rows, dtype=torch.int64, device=device)
            self._digests_host = torch.empty_like(self._digests, device="cpu", pin_memory=pin) if self.cuda \
                else self._digests
            self._digest_raw = _raw(self._digests_host)

    def _fits(self, out: object, shape: tuple[int, ...], dtype: torch.dtype) -> bool:
        return (type(out) is torch.Tensor and tuple(out.shape) == shape and out.dtype == dtype
                and out.device == self.device)

    def take(self, index: int, result: object, inputs: Sequence[torch.Tensor] = ()) -> None:
        self._results[index] = result if self._fits(result, self.shape, self.dtype) else None
        if self._leaf is not None and len(inputs) > self._leaf[0]:
            self._draw(index, inputs[self._leaf[0]])
        if not self.cuda:  # copied and fixed now, inside this call's timed interval
            self._copy(index, index + 1)
            self._frozen[index] = self._fix(index)

    def _draw(self, index: int, leaf: torch.Tensor) -> None:
        """SAMPLED_ROWS random rows of the step's gradient, drawn now (after the step returned)."""
        grad = leaf.grad
        if not self._fits(grad, tuple(leaf.shape), leaf.dtype):
            return  # refused when the gradient is taken (sandbox/child/training.py `_take_grad`), or by the parent
        rows = np.frombuffer(os.urandom(8 * self._rows), dtype=np.uint64) % np.uint64(leaf.shape[0])
        self._index_np[index] = rows.astype(np.int64)
        self._grads[index] = grad.detach()
        self._sampled[index] = tuple(rows.tolist())

    def _copy(self, lo: int, hi: int) -> None:
        """Queue (GPU) or make (CPU) the copies of calls lo..hi-1: their outputs, their gradients' digests."""
        results = self._results[lo:hi]
        if self.cuda and all(r is not None for r in results):
            torch.stack([r.detach() for r in results], out=self._outputs[lo:hi])
            self._outputs_host[lo:hi].copy_(self._outputs[lo:hi], non_blocking=True)
        else:
            for i, result in enumerate(results, lo):
                if result is not None:
                    self._outputs_host[i].copy_(result.detach(), non_blocking=True)
        steps = [i for i in range(lo, hi) if self._grads[i] is not None]
        if not steps:
            return
        if self.cuda:
            self._index[lo:hi].copy_(self._index_host[lo:hi], non_blocking=True)
        for i in steps:
            torch.index_select(self._grads[i], 0, self._index[i], out=self._gathered[i])
        torch.mul(self._gathered[lo:hi].view(torch.int32), self._weights, out=self._product[lo:hi])
        torch.sum(self._product[lo:hi], dim=2, out=self._digests[lo:hi])
        if self.cuda:
            self._digests_host[lo:hi].copy_(self._digests[lo:hi], non_blocking=True)

    def _fix(self, index: int) -> Kept:
        size = self._output_bytes
        taken = self._results[index] is not None
        output = self._output_raw[index * size:(index + 1) * size].tobytes() if taken else None
        if not self._sampled[index] or self._grads[index] is None:
            return Kept(output=output)
        size = 8 * self._rows
        return Kept(output=output, rows=self._sampled[index],
                    row_digests=self._digest_raw[index * size:(index + 1) * size].tobytes(),
                    weights=self._weights)

    def close(self) -> tuple[Kept, ...]:
        if self.cuda:  # queued on this stream after the batch's last call: wait for them alone
            self._copy(0, self.calls)
            torch.cuda.current_stream(self.device).synchronize()
            self._frozen = [self._fix(i) for i in range(self.calls)]
        if self.at_close is not None:
            self.findings = list(self.at_close())
        return tuple(k if k is not None else Kept(output=None) for k in self._frozen)


def raw_bytes(t: torch.Tensor) -> bytes:
    """A tensor's bytes now, through the host (the reply path's own read)."""
    return t.detach().cpu().contiguous().view(-1).view(torch.uint8).numpy().tobytes()


def changed_after(outputs: Sequence[object], kept: Sequence[Kept]) -> list[str]:
    """Calls whose output differs now from what was kept inside the window: work done after the last event."""
    return [f"timed call {i} of the batch: its output changed after the batch's last event (work done after "
            "the timing window, or on a stream the call did not join)"
            for i, (out, k) in enumerate(zip(outputs, kept))
            if k.output is not None and type(out) is torch.Tensor and raw_bytes(out) != k.output]


def gradient_changed_after(grad: torch.Tensor, kept: Kept, step: int) -> str | None:
    """The sampled rows of a step's gradient now, against their digests kept inside the window."""
    if kept.row_digests is None or type(grad) is not torch.Tensor:
        return None
    index = torch.tensor(kept.rows, dtype=torch.int64, device=grad.device)
    if raw_bytes(row_digests(grad, index, kept.weights)) == kept.row_digests:
        return None
    return (f"the gradient of step {step} changed after the batch's last event (work done after the timing "
            "window, or on a stream the step did not join)")
