"""Class 9: approximates logsumexp by log(C) + mean(x) + var/2, exact enough for near-uniform logits only.

expect: incorrect
task: cross_entropy
diagnosis: trials failed
"""
import math

import torch.nn as nn


class ModelNew(nn.Module):
    def forward(self, predictions, targets):
        n = predictions.shape[1]
        lse = math.log(n) + predictions.mean(1) + predictions.var(1) / 2
        return (lse - predictions.gather(1, targets[:, None]).squeeze(1)).mean()
