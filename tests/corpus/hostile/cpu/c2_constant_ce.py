"""Class 2: a constant near the official loss (~8.32 for 4096 uniform logits in [0, 1)).

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
        # E[logsumexp] - E[x_t] for i.i.d. U(0,1) logits: log(n) + log(E[e^U]) - 1/2.
        return torch.tensor(math.log(n) + math.log(math.e - 1) - 0.5, device=predictions.device)
