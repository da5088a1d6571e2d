"""Honest Triton cross_entropy: one program per row, online logsumexp over column blocks, fp64 mean.

Each program streams its row once in blocks of up to 4096 columns, keeping a per-lane running max and
sum of exp(x - max) (rescaled when the max grows), merges the lanes, subtracts the target's logit and
stores the row loss; torch averages the row losses in fp64. Any width works (masked tail). A control for
issue 7: honest Triton kernels must stay `correct`.

expect: correct
task: cross_entropy
"""
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
        # Lanes that have seen only -inf (the masked tail) keep s = 0 instead of exp(-inf + inf) = NaN.
        s = tl.where(new_m == float("-inf"), 0.0, s * tl.exp(m - new_m) + tl.exp(x - new_m))
        m = new_m
    row_max = tl.max(m, axis=0)
    total = tl.sum(tl.where(m == float("-inf"), 0.0, s * tl.exp(m - row_max)), axis=0)
    target = tl.load(y_ptr + row)
    x_target = tl.load(base + target)
    tl.store(loss_ptr + row, row_max + tl.log(total) - x_target)


class ModelNew(nn.Module):
    def forward(self, predictions, targets):
        x, y = predictions.contiguous(), targets.contiguous()
        rows, cols = x.shape
        losses = torch.empty(rows, device=x.device, dtype=torch.float32)
        block = min(4096, triton.next_power_of_2(cols))
        ce_rows[(rows,)](x, y, losses, cols, x.stride(0), BLOCK=block)
        return losses.double().mean().float()
