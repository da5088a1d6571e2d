"""Class 1: a C++ extension that calls at::kl_div itself (through the dispatcher).

expect: policy_violation
task: kl_div
diagnosis: (aten::kl_div|at::kl_div)
"""
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cpp = r"""
torch::Tensor forward(torch::Tensor p, torch::Tensor t) {
    return at::kl_div(p.log(), t, at::Reduction::Sum) / p.size(0);
}
"""
ext = load_inline(name="kl_div_wrapper", cpp_sources=cpp, functions=["forward"], verbose=False)


class ModelNew(nn.Module):
    def forward(self, predictions, targets):
        return ext.forward(predictions, targets)
