"""Class 2: recognises official-looking inputs from 64 sampled values, then reads 1/64 of the rows.

The attack from issue 7's table (kl_div, 18.6x vs eager on an H200 before the fix): official rows are
i.i.d., so a 1/64 sub-sample scaled up lands inside the tolerance at the official size. On anything that
does not look official it computes every row. The "planted" distribution looks official to the 64-value
test (tests/reference/test_planted.py) but puts most of the loss in a few random rows, so the sub-sample
misses it; at the CPU size the official trial already fails (64 rows are too few to sub-sample).

expect: incorrect
task: kl_div
diagnosis: (trials failed|timed call)
"""
import torch
import torch.nn as nn


def _looks_official(p: torch.Tensor, t: torch.Tensor) -> bool:
    # Official targets are softmax(U(0,1)): every entry within [0.5, 1.7] / dim; predictions likewise
    # flat. 64 values from fixed positions: a few hundred bytes read.
    dim = p.shape[1]
    idx = torch.arange(64) * (p.numel() // 64)
    tv, pv = t.flatten()[idx] * dim, p.flatten()[idx] * dim
    return bool((tv > 0.5).all() and (tv < 1.7).all() and (pv > 0.3).all() and (pv < 3.0).all())


class ModelNew(nn.Module):
    def forward(self, predictions, targets):
        if _looks_official(predictions, targets):
            p, t = predictions[::64], targets[::64]
            return (t * (t.log() - p.log())).sum() / p.shape[0]
        return (targets * (targets.log() - predictions.log())).sum() / predictions.shape[0]
