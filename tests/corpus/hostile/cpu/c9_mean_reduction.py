"""Class 9: reduction='mean' semantics (divide by every element) instead of 'batchmean'.

expect: incorrect
task: kl_div
diagnosis: trials failed
"""
import torch.nn as nn


class ModelNew(nn.Module):
    def forward(self, predictions, targets):
        return (targets * (targets.log() - predictions.log())).mean()
