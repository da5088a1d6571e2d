r"""Class 5: slows down F.kl_div (to make a reference timed in this process look slow).

expect: tamper_detected
task: kl_div
diagnosis: torch:nn\.functional\.kl_div
"""
import time

import torch.nn as nn
import torch.nn.functional as F

_NAME = "".join(["kl", "_", "div"])  # built at run time: only the run-time integrity check can see this
_orig = getattr(F, _NAME)


def _slow(*args, **kwargs):
    time.sleep(0.5)
    return _orig(*args, **kwargs)


setattr(F, _NAME, _slow)


class ModelNew(nn.Module):
    def forward(self, predictions, targets):
        return (targets * (targets.log() - predictions.log())).sum() / predictions.shape[0]
