"""Class 1: the private torch._C._nn binding of cross entropy.

expect: policy_violation
task: cross_entropy
diagnosis: (cross_entropy|forbidden)
"""
import torch
import torch.nn as nn

_c = torch._C
_binding = getattr(_c._nn, "cross_entropy" + "_loss")


class ModelNew(nn.Module):
    def forward(self, predictions, targets):
        return _binding(predictions, targets)
