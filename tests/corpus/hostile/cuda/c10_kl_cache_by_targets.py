r"""Class 10: an honest Triton kernel behind a cache keyed by the targets (issue 25, the dependence check).

The key is 64 sampled target values and the shape; an answer remembered for them saves the predictions'
half of the work whenever targets repeat. No two trials or timed calls used to share an input, so the cache
never hit; now each planted trial has a partner with the same targets and fresh predictions
(Task.paired_distributions, sandbox/execution/phases.py), and the cached answer is wrong for it.

expect: incorrect
task: kl_div
diagnosis: trials failed \(planted
"""
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
        idx = torch.arange(64, device=targets.device) * (targets.numel() // 64)
        key = (tuple(targets.shape), tuple(targets.flatten()[idx].tolist()))
        if key not in _cache:
            _cache[key] = (kl_sum(predictions, targets) / predictions.shape[0]).float()
        return _cache[key].clone()
