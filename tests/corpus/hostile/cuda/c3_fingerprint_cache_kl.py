"""Class 3: answers cached by a fingerprint of 16 sampled input values (issue 7's table: kl_div, 33.5x eager).

Before issue 7 the timed calls cycled through two input sets, so every timed call after the first two
hit the cache (615% of speed-of-light on an H200). With a fresh seed per timed call the fingerprint never
repeats: every call runs the honest Triton kernel. Expected: correct, with an honest time (a cache that
hit would be far under speed-of-light: tamper_detected, rule implausible_speed).

expect: correct
task: kl_div
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


_cache = {}


class ModelNew(nn.Module):
    def forward(self, predictions, targets):
        idx = torch.arange(16, device=predictions.device) * (predictions.numel() // 16)
        key = (tuple(predictions.shape), tuple(predictions.flatten()[idx].tolist()),
               tuple(targets.flatten()[idx].tolist()))
        if key not in _cache:
            _cache[key] = (kl_sum(predictions, targets) / predictions.shape[0]).float()
        return _cache[key].clone()
