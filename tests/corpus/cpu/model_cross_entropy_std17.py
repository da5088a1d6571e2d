"""As models sometimes write it: `extra_cflags=["-std=c++17"]` (torch asks for C++17 or later), torch/extension.h
again, a `functions=` list. Not a flag the judge precompiles with: built as torch alone would build it.

expect: correct
task: cross_entropy
"""
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cpp_src = r"""
#include <torch/extension.h>
#include <algorithm>
#include <cmath>

torch::Tensor ce_forward(torch::Tensor logits, torch::Tensor targets) {
    auto x = logits.contiguous();
    auto t = targets.contiguous();
    const auto rows = x.size(0), cols = x.size(1);
    const float* xp = x.data_ptr<float>();
    const int64_t* tp = t.data_ptr<int64_t>();
    double total = 0.0;
    for (int64_t r = 0; r < rows; ++r) {
        const float* row = xp + r * cols;
        const float m = *std::max_element(row, row + cols);
        double s = 0.0;
        for (int64_t c = 0; c < cols; ++c) s += std::exp(static_cast<double>(row[c] - m));
        total += static_cast<double>(m) + std::log(s) - static_cast<double>(row[tp[r]]);
    }
    return torch::full({}, static_cast<float>(total / static_cast<double>(rows)), x.options());
}
"""

ce_module = load_inline(name="cross_entropy_std17", cpp_sources=[cpp_src], functions=["ce_forward"],
                        extra_cflags=["-std=c++17"], verbose=False)


class ModelNew(nn.Module):
    def forward(self, predictions, targets):
        return ce_module.ce_forward(predictions, targets)
