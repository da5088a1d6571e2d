"""Class 8: exhausts host memory with plain Python objects.

Killed by the memory cgroup at the limit, or, where the host pages memory in too slowly to reach the
limit before the call's time limit (the default 16 GiB on the CI machine), stopped at that time limit and
diagnosed from its memory growth (sandbox/supervisor.py, MEMORY_RUNAWAY_BYTES): runtime_error naming
memory either way, never `timeout` (test_corpus.py runs it with the default limit too).

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
