r"""Class 6: torch.empty on the device, hoping to find a reference result in freed memory.

expect: incorrect
task: kl_div
diagnosis: trials failed
"""
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def forward(self, predictions, targets):
        return torch.empty((), device=predictions.device)
