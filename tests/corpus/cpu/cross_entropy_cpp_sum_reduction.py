"""C++ cross_entropy with the wrong reduction: the sum over rows instead of the mean.

expect: incorrect
task: cross_entropy
diagnosis: exceeds atol
"""
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cpp_source = r"""
#include <cmath>

torch::Tensor cross_entropy_sum(torch::Tensor logits, torch::Tensor targets) {
    auto x = logits.contiguous();
    auto t = targets.contiguous();
    const float* xp = x.data_ptr<float>();
    const int64_t* tp = t.data_ptr<int64_t>();
    const int64_t rows = x.size(0), cols = x.size(1);
    double total = 0.0;
    for (int64_t r = 0; r < rows; ++r) {
        const float* row = xp + r * cols;
        float m = row[0];
        for (int64_t c = 1; c < cols; ++c) m = std::max(m, row[c]);
        double s = 0.0;
        for (int64_t c = 0; c < cols; ++c) s += std::exp((double)(row[c] - m));
        total += (double)m + std::log(s) - (double)row[tp[r]];
    }
    return torch::full({}, (float)total, x.options());
}
"""

ext = load_inline(name="cross_entropy_sum", cpp_sources=cpp_source, functions=["cross_entropy_sum"], verbose=False)


class ModelNew(nn.Module):
    def forward(self, predictions, targets):
        return ext.cross_entropy_sum(predictions, targets)
