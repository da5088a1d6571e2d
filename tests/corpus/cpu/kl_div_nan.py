"""Returns NaN: NaN never passes, whatever the tolerance.

expect: incorrect
task: kl_div
diagnosis: NaN
"""
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def forward(self, predictions, targets):
        return torch.full((), float("nan"), device=predictions.device)
