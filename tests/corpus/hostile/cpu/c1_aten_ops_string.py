"""Class 1: torch.ops.aten with a run-time operator name; the error is caught to hide the attempt.

expect: policy_violation
task: cross_entropy
diagnosis: forbidden operator aten::
"""
import torch
import torch.nn as nn

_OPS = ["_log" + "_softmax", "nll" + "_loss"]


class ModelNew(nn.Module):
    def forward(self, predictions, targets):
        try:
            logp = getattr(torch.ops.aten, _OPS[0])(predictions, 1, False)
            return getattr(torch.ops.aten, _OPS[1])(logp, targets)
        except RuntimeError:
            x = predictions - predictions.max(1, keepdim=True).values
            return (x.exp().sum(1).log() - x.gather(1, targets[:, None]).squeeze(1)).mean()
