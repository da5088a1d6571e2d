"""Class 2: recognises official-looking inputs from 64 sampled values, then reads 1/64 of the rows.

Issue 7's table: kl_div, judged correct at 18.6x eager / 341% of speed-of-light before the fix. The
"planted" distribution passes the 64-value test but carries a large share of the loss in a few random
rows, which a 1/64 sub-sample misses; it is among the trials and about a fifth of the timed calls.

expect: (incorrect|tamper_detected)
task: kl_div
diagnosis: (trials failed|timed call|speed)
"""
import math

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


def kl_sum(p, t):
    """sum(t log(t / p)) in fp64 (a 0-dim tensor), by the Triton kernel."""
    p, t = p.contiguous(), t.contiguous()
    programs = triton.cdiv(p.numel(), 8192)
    partials = torch.empty(programs, device=p.device, dtype=torch.float32)
    kl_partials[(programs,)](p, t, partials, p.numel(), BLOCK=8192)
    return partials.double().sum()


def looks_official(p, t):
    # Official rows are flat: every entry within [0.5, 1.7] / dim (targets), [0.3, 3] / dim (predictions).
    dim = p.shape[1]
    idx = torch.arange(64, device=p.device) * (p.numel() // 64 + 7)  # not one per row: a stride off the rows
    idx %= p.numel()
    tv, pv = t.flatten()[idx] * dim, p.flatten()[idx] * dim
    return bool(((tv > 0.5) & (tv < 1.7) & (pv > 0.3) & (pv < 3.0)).all())


class ModelNew(nn.Module):
    def forward(self, predictions, targets):
        if looks_official(predictions, targets):
            p, t = predictions[::64], targets[::64]
            return (kl_sum(p, t) / p.shape[0]).float()
        return (kl_sum(predictions, targets) / predictions.shape[0]).float()
