"""Imports a module this judge lacks through a computed name, which no static check sees: the build stage's
import fails with ModuleNotFoundError, which is certain to fail the execution child the same way (same
interpreter), so it is a compile_error before any device time."""
import importlib

import torch.nn as nn

kernels = importlib.import_module("".join(["tile", "lang_", "not_installed"]))


class ModelNew(nn.Module):
    def forward(self, predictions, targets):
        return kernels.kl_div(predictions, targets)
