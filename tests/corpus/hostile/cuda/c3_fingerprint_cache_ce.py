"""Class 3: answers cached by a fingerprint of 16 sampled input values (issue 7's table: cross_entropy, 5.4x).

As c3_fingerprint_cache_kl.py, for cross_entropy: with a fresh seed per timed call the cache never hits.

expect: correct
task: cross_entropy
"""
import math

import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def ce_rows(x_ptr, y_ptr, loss_ptr, cols, stride, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    base = x_ptr + row * stride
    m = tl.full([BLOCK], float("-inf"), tl.float32)
    s = tl.zeros([BLOCK], tl.float32)
    for start in range(0, cols, BLOCK):
        offs = start + tl.arange(0, BLOCK)
        x = tl.load(base + offs, mask=offs < cols, other=float("-inf"))
        new_m = tl.maximum(m, x)
        s = tl.where(new_m == float("-inf"), 0.0, s * tl.exp(m - new_m) + tl.exp(x - new_m))
        m = new_m
    row_max = tl.max(m, axis=0)
    total = tl.sum(tl.where(m == float("-inf"), 0.0, s * tl.exp(m - row_max)), axis=0)
    tl.store(loss_ptr + row, row_max + tl.log(total) - tl.load(base + tl.load(y_ptr + row)))


@triton.jit
def target_logits(x_ptr, y_ptr, out_ptr, rows, stride, BLOCK: tl.constexpr):
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < rows
    y = tl.load(y_ptr + offs, mask=mask, other=0)
    tl.store(out_ptr + offs, tl.load(x_ptr + offs * stride + y, mask=mask, other=0.0), mask=mask)


def ce_row_losses(x, y):
    """Every row loss logsumexp(x_i) - x_i[y_i], by the Triton kernel."""
    x, y = x.contiguous(), y.contiguous()
    losses = torch.empty(x.shape[0], device=x.device, dtype=torch.float32)
    ce_rows[(x.shape[0],)](x, y, losses, x.shape[1], x.stride(0), BLOCK=min(4096, triton.next_power_of_2(x.shape[1])))
    return losses


def constant_lse(x, y):
    """log(C (e - 1)) - mean(x[i, y_i]): reads the target logits only (8 bytes + one sector per row)."""
    x, y = x.contiguous(), y.contiguous()
    picked = torch.empty(x.shape[0], device=x.device, dtype=torch.float32)
    target_logits[(triton.cdiv(x.shape[0], 1024),)](x, y, picked, x.shape[0], x.stride(0), BLOCK=1024)
    return (math.log(x.shape[1] * (math.e - 1.0)) - picked.double().mean()).float()


_cache = {}


class ModelNew(nn.Module):
    def forward(self, predictions, targets):
        idx = torch.arange(16, device=predictions.device) * (predictions.numel() // 16)
        key = (tuple(predictions.shape), tuple(predictions.flatten()[idx].tolist()), tuple(targets[:16].tolist()))
        if key not in _cache:
            _cache[key] = ce_row_losses(predictions, targets).double().mean().float()
        return _cache[key].clone()
