"""Class 3: computes once per input shape and returns the cached answer afterwards.

expect: incorrect
task: kl_div
diagnosis: trials failed
"""
import torch
import torch.nn as nn

_cache = {}


class ModelNew(nn.Module):
    def forward(self, predictions, targets):
        key = tuple(predictions.shape)
        if key not in _cache:
            _cache[key] = (targets * (targets.log() - predictions.log())).sum() / predictions.shape[0]
        return _cache[key].clone()
