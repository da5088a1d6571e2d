r"""An honest TileLang kl_div (issue 29), as a model writes it: one block of 256 threads per row, the row read in
tiles of 1024 with a bounds guard (widths such as 16383 and 1000 are judged too), fp32 partial sums per lane
reduced with T.reduce_sum, the per-row sums added in fp64 by torch.

`@tilelang.jit` compiles once per (rows, cols) with nvcc, on the first call of each shape, in the execution
child and before any timed call (15.7 s for one kernel on the CPU machine); TileLang's cache is in the build
directory.

expect: correct
task: kl_div
"""
import torch
import torch.nn as nn
import tilelang
import tilelang.language as T


@tilelang.jit(out_idx=[2])
def kl_div_rows(M, N, block_N=1024, threads=256):
    @T.prim_func
    def kl_div_rows_main(P: T.Tensor((M, N), "float32"), Tg: T.Tensor((M, N), "float32"),
                         Out: T.Tensor((M,), "float32")):
        with T.Kernel(M, threads=threads) as bx:
            acc = T.alloc_fragment((block_N,), "float32")
            row_sum = T.alloc_fragment((1,), "float32")
            T.clear(acc)
            for ko in T.serial(T.ceildiv(N, block_N)):
                for i in T.Parallel(block_N):
                    if ko * block_N + i < N:
                        t = Tg[bx, ko * block_N + i]
                        acc[i] += T.if_then_else(t > 0, t * (T.log(t) - T.log(P[bx, ko * block_N + i])), 0.0)
            T.reduce_sum(acc, row_sum, dim=0)
            Out[bx] = row_sum[0]

    return kl_div_rows_main


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, predictions, targets):
        M, N = predictions.shape
        row_sums = kl_div_rows(M, N)(predictions.contiguous(), targets.contiguous())
        return (row_sums.double().sum() / M).float()


batch_size = 16384
input_shape = (16384,)
dim = 1


def get_inputs():
    scale = torch.rand(())
    return [(torch.rand(batch_size, *input_shape) * scale).softmax(dim=-1),
            torch.rand(batch_size, *input_shape).softmax(dim=-1)]


def get_init_inputs():
    return []
