r"""Returns the per-row KL divergences (shape [batch]) instead of the batchmean scalar.

expect: incorrect
task: kl_div
diagnosis: output shape is \[\d+\], expected \[\]
"""
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def forward(self, predictions, targets):
        return (targets * (torch.log(targets) - torch.log(predictions))).sum(dim=1)
