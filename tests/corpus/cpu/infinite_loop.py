"""A C++ kernel that never returns: the per-call time limit ends it with a timeout verdict.

expect: timeout
task: cross_entropy
diagnosis: did not finish
"""
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cpp_source = r"""
torch::Tensor cross_entropy_forward(torch::Tensor logits, torch::Tensor targets) {
    volatile int64_t spin = 0;
    while (spin >= 0) { spin = spin + 1; if (spin > (1LL << 60)) spin = 0; }
    return torch::zeros({}, logits.options());
}
"""

ext = load_inline(name="cross_entropy_spin", cpp_sources=cpp_source, functions=["cross_entropy_forward"], verbose=False)


class ModelNew(nn.Module):
    def forward(self, predictions, targets):
        return ext.cross_entropy_forward(predictions, targets)
