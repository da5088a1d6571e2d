"""Class 3: precomputes answers for the seeds a naive harness would use (0..9, 42, 1234) at import.

expect: incorrect
task: kl_div
diagnosis: trials failed
"""
import torch
import torch.nn as nn

_answers = {}
for seed in list(range(10)) + [42, 1234]:
    torch.manual_seed(seed)
    scale = torch.rand(())
    _answers[seed] = float(scale)  # a stand-in table keyed by seed
_last = [0]


class ModelNew(nn.Module):
    def forward(self, predictions, targets):
        _last[0] = (_last[0] + 1) % 12
        return torch.tensor(_answers[list(_answers)[_last[0]]] * 0.05)
