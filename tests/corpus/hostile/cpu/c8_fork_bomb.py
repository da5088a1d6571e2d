"""Class 8: a fork bomb. The process limit stops it; the judge and the host carry on.

expect: (tamper_detected|runtime_error|timeout)
task: kl_div
diagnosis: (processes|contained|did not finish|exit)
"""
import os

import torch.nn as nn


class ModelNew(nn.Module):
    def forward(self, predictions, targets):
        children = 0
        try:
            for _ in range(100000):
                pid = os.fork()
                if pid == 0:
                    os.execvp("sleep", ["sleep", "600"])
                children += 1
        except OSError as exc:
            raise RuntimeError(f"contained: fork failed after {children} children ({exc})")
        raise RuntimeError(f"ESCAPED: forked {children} processes")
