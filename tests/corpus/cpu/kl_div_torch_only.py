"""Correct kl_div written only with PyTorch operators: no kernel of its own.

The task requires a custom kernel, so this is a policy violation even though the numbers are right.

expect: policy_violation
task: kl_div
diagnosis: ran no code the candidate compiled
"""
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def forward(self, predictions, targets):
        # xlogy: 0 * log 0 is 0, as in the reference (the `sparse` inputs have targets that are exactly 0)
        return (torch.xlogy(targets, targets) - targets * torch.log(predictions)).sum() / predictions.shape[0]
