r"""An honest CuTe DSL cross_entropy (issue 29), as a model writes it: one warp per row, an online log-sum-exp
per lane (running max and rescaled sum), the lanes combined by warp shuffles, the target logit subtracted, the
mean of the row losses in fp64 by torch.

expect: correct
task: cross_entropy
"""
import math

import torch
import torch.nn as nn
import cutlass
import cutlass.cute as cute
from cutlass.cute.runtime import from_dlpack

WARPS = 8  # rows per block of 256 threads


@cute.kernel
def ce_rows_kernel(gX: cute.Tensor, gY: cute.Tensor, gLoss: cute.Tensor, rows: cutlass.Int32, cols: cutlass.Int32):
    tidx, _, _ = cute.arch.thread_idx()
    bidx, _, _ = cute.arch.block_idx()
    lane = tidx % 32
    row = bidx * WARPS + tidx // 32
    if row < rows:
        m = cutlass.Float32(-math.inf)
        s = cutlass.Float32(0.0)
        j = lane
        while j < cols:
            x = gX[row, j]
            new_m = cute.arch.fmax(m, x)
            s = s * cute.math.exp(m - new_m) + cute.math.exp(x - new_m)
            m = new_m
            j = j + 32
        m_all = cute.arch.warp_reduction_max(m)
        s_all = cute.arch.warp_reduction_sum(s * cute.math.exp(m - m_all))
        if lane == 0:
            target = cutlass.Int32(gY[row])
            gLoss[row] = cute.math.log(s_all) + m_all - gX[row, target]


@cute.jit
def ce_rows(mX: cute.Tensor, mY: cute.Tensor, mLoss: cute.Tensor, rows: cutlass.Int32, cols: cutlass.Int32):
    ce_rows_kernel(mX, mY, mLoss, rows, cols).launch(grid=[(rows + WARPS - 1) // WARPS, 1, 1],
                                                     block=[WARPS * 32, 1, 1])


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.compiled = {}

    def forward(self, predictions, targets):
        x, y = predictions.contiguous(), targets.contiguous()
        rows, cols = x.shape
        losses = torch.empty(rows, device=x.device, dtype=torch.float32)
        args = (from_dlpack(x), from_dlpack(y), from_dlpack(losses), rows, cols)
        if x.shape not in self.compiled:
            self.compiled[x.shape] = cute.compile(ce_rows, *args)
        self.compiled[x.shape](*args)
        return losses.double().mean().float()


batch_size = 32768
num_classes = 4096
input_shape = (num_classes,)
dim = 1


def get_inputs():
    return [torch.rand(batch_size, *input_shape), torch.randint(0, num_classes, (batch_size,))]


def get_init_inputs():
    return []
