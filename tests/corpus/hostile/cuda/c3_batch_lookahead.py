"""Class 3, against batched timing: find every input set of the batch and do all the work in its first call.

The judge arms a batch of timed calls at once (each with its own fresh inputs, all resident on the GPU)
and runs them back to back. This candidate walks the garbage collector's objects for the other armed
input sets (lists holding two tensors of the official shape), computes every answer in the batch's first
call, and answers the later calls from memory in no time. Per-call times are then one long call and
several near-zero ones: a median would report almost nothing. The judge claims each batch by its mean,
which moving work between calls does not change, so the reported time is at least the honest kernel's
(plus the search). Expected: correct with an honest time (min_ms: the 1.15x speed-of-light limit on an
H100), or tamper_detected if the mean were ever under it.

expect: (correct|tamper_detected)
task: kl_div
min_ms: 0.62
"""
import gc

import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def kl_partials(p_ptr, t_ptr, out_ptr, n, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    offs = pid.to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    p = tl.load(p_ptr + offs, mask=mask, other=1.0)
    t = tl.load(t_ptr + offs, mask=mask, other=1.0)
    term = tl.where(t > 0.0, t * tl.log(t / p), 0.0)
    tl.store(out_ptr + pid, tl.sum(term, axis=0))


def kl(p, t):
    programs = triton.cdiv(p.numel(), 8192)
    partials = torch.empty(programs, device=p.device, dtype=torch.float32)
    kl_partials[(programs,)](p, t, partials, p.numel(), BLOCK=8192)
    return (partials.double().sum() / p.shape[0]).float()


_answers = {}


def _armed_sets(shape):
    """Every live [predictions, targets] list of this shape: the batch's input sets."""
    found = []
    for obj in gc.get_objects():
        if (type(obj) is list and len(obj) == 2 and all(type(x) is torch.Tensor for x in obj)
                and obj[0].shape == shape and obj[0].is_cuda):
            found.append(obj)
    return found


class ModelNew(nn.Module):
    def forward(self, predictions, targets):
        key = (predictions.data_ptr(), targets.data_ptr())
        if key in _answers:
            return _answers.pop(key).clone()
        _answers.clear()
        for p, t in _armed_sets(predictions.shape):
            if p.is_contiguous() and t.is_contiguous():
                _answers[(p.data_ptr(), t.data_ptr())] = kl(p, t)
        _answers.pop(key, None)
        return kl(predictions.contiguous(), targets.contiguous())
