r"""An honest TileLang cross_entropy (issue 29), as a model writes it: one block of 256 threads per row, a max
pass and a sum-of-exponentials pass over tiles of 1024 columns with a bounds guard (4095 and 50257 columns are
judged too), T.reduce_max / T.reduce_sum across the block, the target logit subtracted, the mean in fp64 by torch.

expect: correct
task: cross_entropy
"""
import torch
import torch.nn as nn
import tilelang
import tilelang.language as T


@tilelang.jit(out_idx=[2])
def ce_rows(M, N, block_N=1024, threads=256):
    @T.prim_func
    def ce_rows_main(X: T.Tensor((M, N), "float32"), Y: T.Tensor((M,), "int64"), L: T.Tensor((M,), "float32")):
        with T.Kernel(M, threads=threads) as bx:
            part = T.alloc_fragment((block_N,), "float32")
            row_max = T.alloc_fragment((1,), "float32")
            row_sum = T.alloc_fragment((1,), "float32")
            T.fill(part, -T.infinity("float32"))
            for ko in T.serial(T.ceildiv(N, block_N)):
                for i in T.Parallel(block_N):
                    if ko * block_N + i < N:
                        part[i] = T.max(part[i], X[bx, ko * block_N + i])
            T.reduce_max(part, row_max, dim=0)
            T.clear(part)
            for ko in T.serial(T.ceildiv(N, block_N)):
                for i in T.Parallel(block_N):
                    if ko * block_N + i < N:
                        part[i] += T.exp(X[bx, ko * block_N + i] - row_max[0])
            T.reduce_sum(part, row_sum, dim=0)
            L[bx] = T.log(row_sum[0]) + row_max[0] - X[bx, Y[bx]]

    return ce_rows_main


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, predictions, targets):
        M, N = predictions.shape
        losses = ce_rows(M, N)(predictions.contiguous(), targets.contiguous())
        return losses.double().mean().float()


batch_size = 32768
num_classes = 4096
input_shape = (num_classes,)
dim = 1


def get_inputs():
    return [torch.rand(batch_size, *input_shape), torch.randint(0, num_classes, (batch_size,))]


def get_init_inputs():
    return []
