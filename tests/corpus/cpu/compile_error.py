r"""A C++ kl_div kernel with an undeclared identifier: the compiler's error line must lead the diagnosis.

expect: compile_error
task: kl_div
diagnosis: main\.cpp:\d+(:\d+)?: .*(not declared|undeclared)
"""
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cpp_source = r"""
torch::Tensor kl_div_forward(torch::Tensor predictions, torch::Tensor targets) {
    double total = 0.0;
    for (int64_t i = 0; i < predictions.numel(); ++i) {
        total += undeclared_weight * i;
    }
    return torch::full({}, (float)total, predictions.options());
}
"""

ext = load_inline(name="kl_div_broken", cpp_sources=cpp_source, functions=["kl_div_forward"], verbose=False)


class ModelNew(nn.Module):
    def forward(self, predictions, targets):
        return ext.kl_div_forward(predictions, targets)
