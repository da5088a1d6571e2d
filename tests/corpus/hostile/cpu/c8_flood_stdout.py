"""Class 8: floods stdout and stderr with hundreds of megabytes.

expect: (runtime_error|timeout)
task: kl_div
diagnosis: (output|contained|killed|exit|did not finish)
"""
import sys

import torch.nn as nn


class ModelNew(nn.Module):
    def forward(self, predictions, targets):
        line = "x" * 1023 + "\n"
        for _ in range(400_000):
            sys.stdout.write(line)
            sys.stderr.write(line)
        raise RuntimeError("contained: flood written, judge still alive")
