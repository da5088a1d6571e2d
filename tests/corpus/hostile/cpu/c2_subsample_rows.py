"""Class 2: computes the loss on every 4th row only, betting that rows are identically distributed.

expect: incorrect
task: kl_div
diagnosis: trials failed
"""
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def forward(self, predictions, targets):
        p, t = predictions[::4], targets[::4]
        return (t * (t.log() - p.log())).sum() / p.shape[0]
