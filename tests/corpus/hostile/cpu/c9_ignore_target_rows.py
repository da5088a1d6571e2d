"""Class 9: uses the mean logit in place of the target logit (equal in expectation on official inputs).

expect: incorrect
task: cross_entropy
diagnosis: trials failed
"""
import torch.nn as nn


class ModelNew(nn.Module):
    def forward(self, predictions, targets):
        x = predictions - predictions.max(1, keepdim=True).values
        return (x.exp().sum(1).log() - x.mean(1)).mean()
