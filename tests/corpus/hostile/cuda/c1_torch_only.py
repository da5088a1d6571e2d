r"""Class 1: no kernel of its own, only PyTorch operators (correct numbers, fast on the GPU).

expect: policy_violation
task: cross_entropy
diagnosis: ran no code the candidate compiled
"""
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def forward(self, predictions, targets):
        m = predictions.max(1, keepdim=True).values
        lse = m.squeeze(1) + torch.log(torch.exp(predictions - m).sum(1))
        return (lse - predictions.gather(1, targets[:, None]).squeeze(1)).mean()
