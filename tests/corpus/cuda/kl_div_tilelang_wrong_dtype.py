r"""A TileLang kl_div with a model's bug (issue 29): the kernel is declared for float32, and the forward hands it the
float64 copies it made "for precision". TileLang's runtime (tvm-ffi) checks each argument in C++ and raises; the
error's traceback carries a Python frame per C++ backtrace line, which tvm-ffi makes by evaluating a bare
`_getframe()` stub under the C++ file's name. The judge's audit hook once took that frame for the candidate asking
for frames (tamper_detected); an honest failure is the candidate's own runtime_error.

expect: runtime_error
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
        # Promote to float64 for a more accurate sum (the kernel was declared for float32: the runtime refuses)
        p64, t64 = predictions.double().contiguous(), targets.double().contiguous()
        row_sums = kl_div_rows(M, N)(p64, t64)
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
