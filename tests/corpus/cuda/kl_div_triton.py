"""Honest Triton kl_div: one pass over the flattened inputs, per-program fp32 partial sums, fp64 total.

sum(t * log(t / p)) / batch. Each program reads BLOCK elements of both inputs once (masked tail, so any
size works), sums its terms in fp32 and stores one partial; the partials (one per 8192 elements) are
added in fp64 by torch. A control for issue 7: honest Triton kernels must stay `correct`.

expect: correct
task: kl_div
"""
import torch
import torch.nn as nn
import triton
import triton.language as tl

BLOCK = 8192


@triton.jit
def kl_partials(p_ptr, t_ptr, out_ptr, n, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    offs = pid.to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    p = tl.load(p_ptr + offs, mask=mask, other=1.0)
    t = tl.load(t_ptr + offs, mask=mask, other=1.0)  # t = p = 1 contributes 1 * log(1) = 0
    term = tl.where(t > 0.0, t * tl.log(t / p), 0.0)
    tl.store(out_ptr + pid, tl.sum(term, axis=0))


class ModelNew(nn.Module):
    def forward(self, predictions, targets):
        p, t = predictions.contiguous(), targets.contiguous()
        n = p.numel()
        programs = triton.cdiv(n, BLOCK)
        partials = torch.empty(programs, device=p.device, dtype=torch.float32)
        kl_partials[(programs,)](p, t, partials, n, BLOCK=BLOCK)
        return (partials.double().sum() / p.shape[0]).float()
