r"""A CuTe DSL (CUTLASS Python) kl_div, as a model writes it: `@cute.kernel` with per-thread partial sums.

Issue 24: CuTe DSL samples held the GPU and then failed with ModuleNotFoundError. Where the DSL is not
installed the judge must say so before any build or device time: a compile_error naming `cutlass` and what
this host can judge.

expect: compile_error
task: kl_div
diagnosis: imports cutlass \(CuTe DSL / CUTLASS Python\), a kernel language this judge cannot run.*load_inline
"""
import torch
import torch.nn as nn
import cutlass
import cutlass.cute as cute
from cutlass.cute.runtime import from_dlpack

THREADS = 256


@cute.kernel
def kl_div_kernel(gP: cute.Tensor, gT: cute.Tensor, gPartial: cute.Tensor, n: cutlass.Int32):
    tidx, _, _ = cute.arch.thread_idx()
    bidx, _, _ = cute.arch.block_idx()
    gdim, _, _ = cute.arch.grid_dim()
    acc = cutlass.Float32(0.0)
    i = bidx * THREADS + tidx
    while i < n:
        t = gT[i]
        if t > 0.0:
            acc += t * (cute.math.log(t) - cute.math.log(gP[i]))
        i += gdim * THREADS
    gPartial[bidx * THREADS + tidx] = acc


@cute.jit
def kl_div_launch(mP: cute.Tensor, mT: cute.Tensor, mPartial: cute.Tensor, n: cutlass.Int32, blocks: cutlass.Int32):
    kl_div_kernel(mP, mT, mPartial, n).launch(grid=[blocks, 1, 1], block=[THREADS, 1, 1])


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self._compiled = None

    def forward(self, predictions, targets):
        p, t = predictions.contiguous().view(-1), targets.contiguous().view(-1)
        blocks = 1024
        partial = torch.empty(blocks * THREADS, device=p.device, dtype=torch.float32)
        args = (from_dlpack(p), from_dlpack(t), from_dlpack(partial), p.numel(), blocks)
        if self._compiled is None:
            self._compiled = cute.compile(kl_div_launch, *args)
        self._compiled(*args)
        return partial.double().sum().float() / predictions.shape[0]


def get_inputs():
    scale = torch.rand(())
    return [(torch.rand(16384, 16384) * scale).softmax(dim=-1), torch.rand(16384, 16384).softmax(dim=-1)]


def get_init_inputs():
    return []
