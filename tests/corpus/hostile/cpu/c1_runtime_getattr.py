"""Class 1: the reference operator reached through a name built at run time (no static trace).

expect: policy_violation
task: kl_div
diagnosis: forbidden operator aten::kl_div
"""
import torch
import torch.nn as nn

_NAME = "".join(["k", "l", "_", "d", "i", "v"])


class ModelNew(nn.Module):
    def forward(self, predictions, targets):
        return getattr(torch.nn.functional, _NAME)(predictions.log(), targets, reduction="batchmean")
