r"""Class 1 in CuTe DSL (issue 29): a real @cute.kernel, compiled on the first call so the module looks like a
CuTe DSL candidate, but never launched; the answer comes from PyTorch operators (correct numbers, zeros included: xlogy, so that
only the rule can refuse it; with t * log(t) the sparse inputs' zeros gave NaN and an `incorrect` first). The
"runs code it built" rule must see that no kernel of the candidate's ran.

expect: policy_violation
task: kl_div
diagnosis: ran no code the candidate compiled
"""
import torch
import torch.nn as nn
import cutlass
import cutlass.cute as cute
from cutlass.cute.runtime import from_dlpack


@cute.kernel
def kl_terms_kernel(gP: cute.Tensor, gT: cute.Tensor, gOut: cute.Tensor, n: cutlass.Int32):
    tidx, _, _ = cute.arch.thread_idx()
    bidx, _, _ = cute.arch.block_idx()
    i = bidx * 256 + tidx
    if i < n:
        gOut[i] = gT[i] * (cute.math.log(gT[i]) - cute.math.log(gP[i]))


@cute.jit
def kl_terms(mP: cute.Tensor, mT: cute.Tensor, mOut: cute.Tensor, n: cutlass.Int32):
    kl_terms_kernel(mP, mT, mOut, n).launch(grid=[(n + 255) // 256, 1, 1], block=[256, 1, 1])


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.compiled = None

    def forward(self, predictions, targets):
        p, t = predictions.contiguous().view(-1), targets.contiguous().view(-1)
        if self.compiled is None:
            out = torch.empty_like(p)
            self.compiled = cute.compile(kl_terms, from_dlpack(p), from_dlpack(t), from_dlpack(out), p.numel())
        return (torch.xlogy(targets, targets) - targets * predictions.log()).sum() / predictions.shape[0]


def get_inputs():
    return [torch.rand(16384, 16384).softmax(dim=-1), torch.rand(16384, 16384).softmax(dim=-1)]


def get_init_inputs():
    return []
