r"""Class 3 in TileLang (issue 29): an honest TileLang kernel behind a cache keyed by the inputs' data pointers,
so a call whose buffers sit where earlier ones did returns the earlier answer: fast and wrong once buffers repeat.

On the GPU the caching allocator hands the child the same addresses trial after trial, so the trials already
catch it; the refilled buffers of the timed calls would otherwise.

expect: incorrect
task: cross_entropy
diagnosis: (trials failed|timed call \d+ returned a wrong result)
"""
import torch
import torch.nn as nn
import tilelang
import tilelang.language as T


@tilelang.jit(out_idx=[2])
def ce_rows(M, N, block_N=1024, threads=256):
    @T.prim_func
    def ce_cached_main(X: T.Tensor((M, N), "float32"), Y: T.Tensor((M,), "int64"), L: T.Tensor((M,), "float32")):
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

    return ce_cached_main


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.cache = {}

    def forward(self, predictions, targets):
        key = (predictions.data_ptr(), targets.data_ptr(), tuple(predictions.shape))
        if key not in self.cache:
            M, N = predictions.shape
            self.cache[key] = ce_rows(M, N)(predictions.contiguous(), targets.contiguous()).double().mean().float()
        return self.cache[key].clone()


def get_inputs():
    return [torch.rand(32768, 4096), torch.randint(0, 4096, (32768,))]


def get_init_inputs():
    return []
