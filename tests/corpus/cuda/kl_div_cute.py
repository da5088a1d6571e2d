r"""An honest CuTe DSL kl_div (issue 29), as a model writes it: one warp per row, lanes striding the row with
coalesced scalar loads, fp32 per-lane sums, a warp shuffle reduction, the per-row sums added in fp64 by torch.

`cute.compile` specialises on the tensors' shapes, so it compiles once per shape, on the first call of each
(0.5 s per shape on the CPU machine): that is before any timed call, in the execution child.

expect: correct
task: kl_div
"""
import torch
import torch.nn as nn
import cutlass
import cutlass.cute as cute
from cutlass.cute.runtime import from_dlpack

WARPS = 8  # rows per block of 256 threads


@cute.kernel
def kl_rows_kernel(gP: cute.Tensor, gT: cute.Tensor, gRow: cute.Tensor, rows: cutlass.Int32, cols: cutlass.Int32):
    tidx, _, _ = cute.arch.thread_idx()
    bidx, _, _ = cute.arch.block_idx()
    lane = tidx % 32
    row = bidx * WARPS + tidx // 32
    if row < rows:
        acc = cutlass.Float32(0.0)
        j = lane
        while j < cols:
            t = gT[row, j]
            if t > cutlass.Float32(0.0):
                acc = acc + t * (cute.math.log(t) - cute.math.log(gP[row, j]))
            j = j + 32
        acc = cute.arch.warp_reduction_sum(acc)
        if lane == 0:
            gRow[row] = acc


@cute.jit
def kl_rows(mP: cute.Tensor, mT: cute.Tensor, mRow: cute.Tensor, rows: cutlass.Int32, cols: cutlass.Int32):
    kl_rows_kernel(mP, mT, mRow, rows, cols).launch(grid=[(rows + WARPS - 1) // WARPS, 1, 1],
                                                    block=[WARPS * 32, 1, 1])


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.compiled = {}

    def forward(self, predictions, targets):
        p, t = predictions.contiguous(), targets.contiguous()
        rows, cols = p.shape
        row_sums = torch.empty(rows, device=p.device, dtype=torch.float32)
        args = (from_dlpack(p), from_dlpack(t), from_dlpack(row_sums), rows, cols)
        if p.shape not in self.compiled:
            self.compiled[p.shape] = cute.compile(kl_rows, *args)
        self.compiled[p.shape](*args)
        return (row_sums.double().sum() / rows).float()


batch_size = 16384
input_shape = (16384,)
dim = 1


def get_inputs():
    scale = torch.rand(())
    return [(torch.rand(batch_size, *input_shape) * scale).softmax(dim=-1),
            torch.rand(batch_size, *input_shape).softmax(dim=-1)]


def get_init_inputs():
    return []
