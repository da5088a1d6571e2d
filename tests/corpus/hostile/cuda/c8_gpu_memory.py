r"""Class 8: exhausts device memory; the verdict is an error, the worker and the next candidate are fine.

expect: runtime_error
task: cross_entropy
diagnosis: (out of device memory|out of memory|OutOfMemory)
"""
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def forward(self, predictions, targets):
        hoard = []
        while True:
            hoard.append(torch.empty(1 << 30, dtype=torch.uint8, device=predictions.device))
