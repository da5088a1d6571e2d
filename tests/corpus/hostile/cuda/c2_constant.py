r"""Class 2: a constant close to the official cross-entropy loss, returned on the GPU.

expect: incorrect
task: cross_entropy
diagnosis: trials failed
"""
import math

import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def forward(self, predictions, targets):
        n = predictions.shape[1]
        return torch.tensor(math.log(n) + math.log(math.e - 1) - 0.5, device=predictions.device)
