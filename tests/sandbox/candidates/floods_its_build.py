"""Writes far more than the output limit while it is imported, as a compile with megabytes of errors does (torch's
headers under -std=c++14 with nvcc): the build stage's child is killed for flooding, and that is the candidate's
compile_error, decided before any device time."""
import sys

import torch.nn as nn

chunk = "error: " + "x" * 4089 + "\n"
for _ in range(16 << 10):  # 64 MiB
    sys.stderr.write(chunk)


class ModelNew(nn.Module):
    def forward(self, predictions, targets):
        return (targets * (targets.log() - predictions.log())).sum() / predictions.shape[0]
