r"""A CuTe DSL cross_entropy, as a model writes it: one thread block per row, online log-sum-exp.

Issue 24: CuTe DSL samples held the GPU and then failed with ModuleNotFoundError. Where the DSL is not
installed the judge must say so before any build or device time: a compile_error naming the module and what
this host can judge.

expect: compile_error
task: cross_entropy
diagnosis: imports cutlass.cute \(CuTe DSL / CUTLASS Python\), a kernel language this judge cannot run.*load_inline
"""
import math

import torch
import torch.nn as nn
import cutlass.cute as cute
from cutlass import Float32, Int32
from cutlass.cute.runtime import from_dlpack


@cute.kernel
def ce_rows(gX: cute.Tensor, gY: cute.Tensor, gL: cute.Tensor, n_cols: Int32):
    tidx, _, _ = cute.arch.thread_idx()
    row, _, _ = cute.arch.block_idx()
    m = Float32(-math.inf)
    s = Float32(0.0)
    j = tidx
    while j < n_cols:
        x = gX[row, j]
        new_m = cute.arch.fmax(m, x)
        s = s * cute.math.exp(m - new_m) + cute.math.exp(x - new_m)
        m = new_m
        j += 128
    m_all = cute.arch.warp_reduction_max(m)
    s_all = cute.arch.warp_reduction_sum(s * cute.math.exp(m - m_all))
    if tidx == 0:
        gL[row] = cute.math.log(s_all) + m_all - gX[row, gY[row]]


@cute.jit
def launch(mX: cute.Tensor, mY: cute.Tensor, mL: cute.Tensor, rows: Int32, cols: Int32):
    ce_rows(mX, mY, mL, cols).launch(grid=[rows, 1, 1], block=[128, 1, 1])


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.compiled = None

    def forward(self, predictions, targets):
        rows, cols = predictions.shape
        losses = torch.empty(rows, device=predictions.device, dtype=torch.float32)
        args = (from_dlpack(predictions.contiguous()), from_dlpack(targets), from_dlpack(losses), rows, cols)
        if self.compiled is None:
            self.compiled = cute.compile(launch, *args)
        self.compiled(*args)
        return losses.mean()


def get_inputs():
    return [torch.rand(32768, 4096), torch.randint(0, 4096, (32768,))]


def get_init_inputs():
    return []
