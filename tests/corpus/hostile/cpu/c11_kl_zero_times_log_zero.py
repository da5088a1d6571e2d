r"""Class 11: kl_div as t * (log t - log p) with no case for t = 0 (issue 25, point 4).

Every distribution the judge drew had strictly positive targets, so 0 * log 0 never came up. The reference
(F.kl_div, xlogy) makes a zero target contribute 0; "sparse" has many, and this kernel returns NaN.

expect: incorrect
task: kl_div
diagnosis: trials failed \(.*sparse
"""
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cpp = r"""
#include <cmath>

torch::Tensor kl_unguarded(torch::Tensor predictions, torch::Tensor targets) {
    auto p = predictions.contiguous(), t = targets.contiguous();
    const float *pp = p.data_ptr<float>(), *tp = t.data_ptr<float>();
    double total = 0.0;
    for (int64_t i = 0; i < p.numel(); ++i) total += (double)tp[i] * (double)(std::log(tp[i]) - std::log(pp[i]));
    return torch::full({}, (float)(total / (double)p.size(0)), p.options());
}
"""
ext = load_inline(name="kl_zero_times_log_zero", cpp_sources=cpp, functions=["kl_unguarded"], verbose=False)


class ModelNew(nn.Module):
    def forward(self, predictions, targets):
        return ext.kl_unguarded(predictions, targets)
