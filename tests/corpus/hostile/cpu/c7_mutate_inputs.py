"""Class 7: normalises its inputs in place (later checks would see other data).

expect: incorrect
task: kl_div
diagnosis: modified its inputs in place
"""
import torch.nn as nn


class ModelNew(nn.Module):
    def forward(self, predictions, targets):
        predictions.clamp_(min=1e-6)
        targets.mul_(1.0000001)
        return (targets * (targets.log() - predictions.log())).sum() / predictions.shape[0]
