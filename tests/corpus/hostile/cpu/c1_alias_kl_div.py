r"""Class 1: the reference operator through an import alias.

expect: policy_violation
task: kl_div
diagnosis: torch\.nn\.functional\.kl_div
"""
import torch.nn as nn
from torch.nn import functional as nnf


class ModelNew(nn.Module):
    def forward(self, predictions, targets):
        return nnf.kl_div(predictions.log(), targets, reduction="batchmean")
