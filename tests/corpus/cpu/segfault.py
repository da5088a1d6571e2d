"""A C++ kernel that dereferences a null pointer: the child dies with SIGSEGV, the judge does not.

expect: runtime_error
task: kl_div
diagnosis: SIGSEGV
"""
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cpp_source = r"""
torch::Tensor kl_div_forward(torch::Tensor predictions, torch::Tensor targets) {
    volatile float* wild = nullptr;
    float value = wild[predictions.numel()];
    return torch::full({}, value, predictions.options());
}
"""

ext = load_inline(name="kl_div_segv", cpp_sources=cpp_source, functions=["kl_div_forward"], verbose=False)


class ModelNew(nn.Module):
    def forward(self, predictions, targets):
        return ext.kl_div_forward(predictions, targets)
