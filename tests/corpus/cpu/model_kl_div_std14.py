r"""As models sometimes write it: `extra_cflags=["-std=c++14"]`. torch's own headers refuse it ("C++17 or
later compatible compiler is required to use PyTorch"), with or without the judge's accelerators.

expect: compile_error
task: kl_div
diagnosis: C\+\+17 or later
"""
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

source = """
#include <torch/extension.h>

torch::Tensor kl_div_cpp(torch::Tensor predictions, torch::Tensor targets) {
    auto p = predictions.contiguous();
    auto t = targets.contiguous();
    const float* pp = p.data_ptr<float>();
    const float* tp = t.data_ptr<float>();
    double total = 0.0;
    for (int64_t i = 0; i < p.numel(); ++i)
        if (tp[i] > 0.0f) total += (double)tp[i] * (std::log((double)tp[i]) - std::log((double)pp[i]));
    return torch::full({}, (float)(total / (double)p.size(0)), p.options());
}
"""

kl_module = load_inline(name="kl_div_std14", cpp_sources=source, functions=["kl_div_cpp"],
                        extra_cflags=["-std=c++14"], verbose=False)


class ModelNew(nn.Module):
    def forward(self, predictions, targets):
        return kl_module.kl_div_cpp(predictions, targets)
