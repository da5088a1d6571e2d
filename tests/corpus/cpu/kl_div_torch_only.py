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
        return (targets * (torch.log(targets) - torch.log(predictions))).sum() / predictions.shape[0]
