"""A PyTorch-only kl_div whose import is quick in the build stage and sleeps in the execution child (the build
stage leaves a file in its working directory, the build directory; the execution child works in a copy of it).

The load step's limit (JudgeConfig.load_timeout_s) must end it, not the sandbox's wall limit.
"""
import time
from pathlib import Path

import torch.nn as nn

_MARK = Path.cwd() / "imported_once"
if _MARK.exists():
    time.sleep(600)
_MARK.write_text("the build stage imported this candidate\n")


class ModelNew(nn.Module):
    def forward(self, predictions, targets):
        return (targets * (targets.log() - predictions.log())).sum() / predictions.shape[0]
