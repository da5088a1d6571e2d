r"""KL divergence with a Numba @njit loop, as a model writes a "CPU kernel" when it is not told what to use: Numba is
a kernel language the judge does not judge (its JIT would compile inside the timed child), refused before any
build whether Numba is installed or not.

expect: compile_error
task: kl_div
diagnosis: imports numba \(Numba\), a kernel language this judge (does not judge|cannot run)
"""
import numpy as np
import torch
import torch.nn as nn
from numba import njit, prange


@njit(parallel=True, fastmath=True)
def _kl_rows(p, t, out):
    for r in prange(p.shape[0]):
        acc = 0.0
        for c in range(p.shape[1]):
            if t[r, c] > 0.0:
                acc += t[r, c] * (np.log(t[r, c]) - np.log(p[r, c]))
        out[r] = acc


class ModelNew(nn.Module):
    def forward(self, predictions, targets):
        p = predictions.detach().contiguous().numpy()
        t = targets.detach().contiguous().numpy()
        out = np.empty(p.shape[0], dtype=np.float64)
        _kl_rows(p, t, out)
        return torch.tensor(out.sum() / p.shape[0], dtype=predictions.dtype)
