"""Allocates far more host memory than the sandbox allows: killed or refused, reported as runtime_error.

expect: runtime_error
task: kl_div
diagnosis: (memory|MemoryError)
"""
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def forward(self, predictions, targets):
        hoard = []
        while True:
            hoard.append(torch.ones(1 << 28, dtype=torch.uint8))  # 256 MiB each, touched
