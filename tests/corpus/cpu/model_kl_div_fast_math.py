"""As models write it: `extra_cflags=["-O3", "-ffast-math"]`, torch/extension.h again, a `functions=` list.
fp32 logs with fp64 accumulation stay well inside the tolerance under -ffast-math.

expect: correct
task: kl_div
"""
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cpp_source = """
#include <torch/extension.h>
#include <cmath>

torch::Tensor kl_div_fast(torch::Tensor predictions, torch::Tensor targets) {
    auto p = predictions.contiguous();
    auto t = targets.contiguous();
    const float* pp = p.data_ptr<float>();
    const float* tp = t.data_ptr<float>();
    const int64_t n = p.numel();
    double total = 0.0;
    for (int64_t i = 0; i < n; ++i) {
        const float ti = tp[i];
        if (ti > 0.0f) total += (double)ti * (double)(logf(ti) - logf(pp[i]));
    }
    return torch::full({}, (float)(total / (double)p.size(0)), p.options());
}
"""

fast = load_inline(name="kl_div_fast_math", cpp_sources=cpp_source, functions=["kl_div_fast"],
                   extra_cflags=["-O3", "-ffast-math"], verbose=False)


class ModelNew(nn.Module):
    def forward(self, predictions, targets):
        return fast.kl_div_fast(predictions, targets)
