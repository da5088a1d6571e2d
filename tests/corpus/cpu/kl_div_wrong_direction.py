"""KL(p||q) instead of KL(q||p): close on the official near-uniform inputs, wrong in general.

expect: incorrect
task: kl_div
diagnosis: trials failed
"""
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def forward(self, predictions, targets):
        return (predictions * (torch.log(predictions) - torch.log(targets))).sum() / predictions.shape[0]
