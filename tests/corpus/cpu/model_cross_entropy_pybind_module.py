"""As models write it: another header before torch's, `#pragma once` and an include guard in cpp_sources,
torch/extension.h again, and its own PYBIND11_MODULE with no `functions=`; `-O3`.

expect: correct
task: cross_entropy
"""
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cpp_source = r"""
#pragma once
#ifndef CROSS_ENTROPY_KERNEL_H
#define CROSS_ENTROPY_KERNEL_H

#include <vector>
#include <algorithm>
#include <torch/extension.h>
#include <cmath>

namespace {

double row_loss(const float* row, int64_t cols, int64_t target) {
    float m = row[0];
    for (int64_t c = 1; c < cols; ++c) m = std::max(m, row[c]);
    double s = 0.0;
    for (int64_t c = 0; c < cols; ++c) s += std::exp((double)(row[c] - m));
    return (double)m + std::log(s) - (double)row[target];
}

}  // namespace

torch::Tensor cross_entropy_forward(torch::Tensor logits, torch::Tensor targets) {
    TORCH_CHECK(logits.dim() == 2, "logits must be 2-D");
    auto x = logits.contiguous();
    auto t = targets.contiguous();
    const float* xp = x.data_ptr<float>();
    const int64_t* tp = t.data_ptr<int64_t>();
    const int64_t rows = x.size(0), cols = x.size(1);
    std::vector<double> losses(rows);
    for (int64_t r = 0; r < rows; ++r) losses[r] = row_loss(xp + r * cols, cols, tp[r]);
    double total = 0.0;
    for (double l : losses) total += l;
    return torch::full({}, (float)(total / (double)rows), x.options());
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
    m.def("forward", &cross_entropy_forward, "cross entropy forward (CPU)");
}

#endif  // CROSS_ENTROPY_KERNEL_H
"""

cross_entropy_cpp = load_inline(
    name="cross_entropy_pybind_module",
    cpp_sources=[cpp_source],
    extra_cflags=["-O3"],
    verbose=False,
)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, predictions, targets):
        return cross_entropy_cpp.forward(predictions, targets)
