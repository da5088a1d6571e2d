"""Class 2: reads only the first quarter of each row of logits and extrapolates.

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
        head = predictions[:, : n // 4]
        m = head.max(1, keepdim=True).values
        lse = m.squeeze(1) + torch.log(torch.exp(head - m).sum(1)) + math.log(4)
        picked = predictions.gather(1, targets[:, None]).squeeze(1)
        return (lse - picked).mean()
