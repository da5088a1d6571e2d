"""Class 6: the right value in float64, which would compare equal after type promotion.

expect: incorrect
task: kl_div
diagnosis: dtype is float64
"""
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def forward(self, predictions, targets):
        p, t = predictions.double(), targets.double()
        return (t * (t.log() - p.log())).sum() / p.shape[0]
