r"""Class 11: kl_div with logarithms accurate only to bf16 (issue 25, point 4).

Each log rounded to bf16 (8 significant bits), as a kernel that computes them in bf16 does. On independent
rows the rounding errors, of either sign, partly average out over the batch. On "near_identical" inputs the
loss is ~1e-5 while each term t (log t - log p) is first order in the difference, and every row rounds
alike: the error does not average out and misses by hundreds of tolerances. fp32 logs (24 bits) pass there.

expect: incorrect
task: kl_div
diagnosis: trials failed \(.*near_identical
"""
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cpp = r"""
#include <cmath>
#include <cstdint>
#include <cstring>

// round to the nearest bf16 (ties to even), returned as a float
static inline float to_bf16(float x) {
    uint32_t bits;
    std::memcpy(&bits, &x, sizeof bits);
    bits += 0x7FFFu + ((bits >> 16) & 1u);
    bits &= 0xFFFF0000u;
    std::memcpy(&x, &bits, sizeof x);
    return x;
}

torch::Tensor kl_bf16_log(torch::Tensor predictions, torch::Tensor targets) {
    auto p = predictions.contiguous(), t = targets.contiguous();
    const float *pp = p.data_ptr<float>(), *tp = t.data_ptr<float>();
    double total = 0.0;
    for (int64_t i = 0; i < p.numel(); ++i) {
        const float ti = tp[i];
        if (ti > 0.0f) total += (double)(ti * (to_bf16(std::log(ti)) - to_bf16(std::log(pp[i]))));
    }
    return torch::full({}, (float)(total / (double)p.size(0)), p.options());
}
"""
ext = load_inline(name="kl_bf16_log", cpp_sources=cpp, functions=["kl_bf16_log"], verbose=False)


class ModelNew(nn.Module):
    def forward(self, predictions, targets):
        return ext.kl_bf16_log(predictions, targets)
