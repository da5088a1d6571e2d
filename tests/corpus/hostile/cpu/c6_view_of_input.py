"""Class 6: returns a view into an input instead of a fresh result.

expect: incorrect
task: cross_entropy
diagnosis: view of
"""
import torch.nn as nn


class ModelNew(nn.Module):
    def forward(self, predictions, targets):
        return predictions[0, 0]
