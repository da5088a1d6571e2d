r"""Class 11: cross_entropy without subtracting the row maximum (issue 25, point 4).

log(sum(exp(x))) - x[target] in fp32. Every distribution the judge drew kept |logits| <= 80, inside exp's
fp32 range (exp overflows past 88.7), so this passed every trial at an honest time. "large_logits" puts
every row hundreds away from 0, where eager PyTorch (log_softmax subtracts the maximum) is exact and this is
inf or NaN.

expect: incorrect
task: cross_entropy
diagnosis: trials failed \(large_logits
"""
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cpp = r"""
#include <cmath>

torch::Tensor ce_no_max(torch::Tensor logits, torch::Tensor targets) {
    auto x = logits.contiguous();
    auto y = targets.contiguous();
    const float* xp = x.data_ptr<float>();
    const int64_t* yp = y.data_ptr<int64_t>();
    const int64_t rows = x.size(0), cols = x.size(1);
    float total = 0.0f;
    for (int64_t r = 0; r < rows; ++r) {
        const float* row = xp + r * cols;
        float s = 0.0f;
        for (int64_t c = 0; c < cols; ++c) s += std::exp(row[c]);
        total += std::log(s) - row[yp[r]];
    }
    return torch::full({}, total / (float)rows, x.options());
}
"""
ext = load_inline(name="ce_no_max_subtraction", cpp_sources=cpp, functions=["ce_no_max"], verbose=False)


class ModelNew(nn.Module):
    def forward(self, predictions, targets):
        return ext.ce_no_max(predictions, targets)
