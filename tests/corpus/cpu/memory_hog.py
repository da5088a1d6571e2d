"""Allocates far more host memory than the sandbox allows: killed or refused, reported as runtime_error.

With a limit the host cannot fill before the call's time limit (slow paging), the call's memory growth
names memory in the diagnosis instead of a plain timeout (see hostile/cpu/c8_host_memory.py).

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
