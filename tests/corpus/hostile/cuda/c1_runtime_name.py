r"""Class 1: F.kl_div through a name built at run time, on the GPU (the dispatcher tripwire fires).

expect: policy_violation
task: kl_div
diagnosis: aten::kl_div
"""
import torch
import torch.nn as nn

_NAME = "".join(["kl", "_div"])


class ModelNew(nn.Module):
    def forward(self, predictions, targets):
        return getattr(torch.nn.functional, _NAME)(torch.log(predictions), targets, reduction="batchmean")
