"""Class 6: returns torch.empty, hoping to pick up a reference result left in freed memory.

expect: incorrect
task: kl_div
diagnosis: trials failed
"""
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def forward(self, predictions, targets):
        return torch.empty((), device=predictions.device)
