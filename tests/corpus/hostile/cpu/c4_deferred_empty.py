"""Class 4: returns an uninitialised tensor and fills it from a raw thread after forward returns.

expect: (tamper_detected|incorrect)
task: cross_entropy
diagnosis: (thread|trials failed|NaN)
"""
import _thread

import torch
import torch.nn as nn


def _fill(out, x, t):
    x = x - x.max(1, keepdim=True).values
    out.copy_((x.exp().sum(1).log() - x.gather(1, t[:, None]).squeeze(1)).mean())
    import time
    time.sleep(3)


class ModelNew(nn.Module):
    def forward(self, predictions, targets):
        out = torch.empty(())
        _thread.start_new_thread(_fill, (out, predictions, targets))
        return out
