"""Class 8: exhausts host memory with plain Python objects.

expect: runtime_error
task: cross_entropy
diagnosis: (memory|MemoryError)
"""
import torch.nn as nn


class ModelNew(nn.Module):
    def forward(self, predictions, targets):
        hoard = []
        while True:
            hoard.append(bytearray(512 << 20))
