"""An honest C++ kl_div kernel (CPU): fp32 logs, fp64 accumulation, batchmean.

expect: correct
task: kl_div
"""
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cpp_source = r"""
#include <cmath>

torch::Tensor kl_div_forward(torch::Tensor predictions, torch::Tensor targets) {
    auto p = predictions.contiguous();
    auto t = targets.contiguous();
    const float* pp = p.data_ptr<float>();
    const float* tp = t.data_ptr<float>();
    const int64_t n = p.numel();
    double total = 0.0;
    for (int64_t i = 0; i < n; ++i) {
        const float ti = tp[i];
        if (ti > 0.0f) total += (double)ti * (double)(std::log(ti) - std::log(pp[i]));
    }
    return torch::full({}, (float)(total / (double)p.size(0)), p.options());
}
"""

kl_ext = load_inline(name="kl_div_cpu", cpp_sources=cpp_source, functions=["kl_div_forward"],
                     extra_cflags=["-O2"], verbose=False)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, predictions, targets):
        return kl_ext.kl_div_forward(predictions, targets)
