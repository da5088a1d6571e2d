r"""Class 11: kl_div with log(max(p, 1e-8)) "for numerical stability" (issue 25, point 4).

A clamp like this changes every term whose prediction is under 1e-8 while its target is not tiny. The
temperature and mismatched inputs have some such terms (on an H200 at the official shape the CUDA version of
this kernel is 360x outside the tolerance there), and planted's pushed-down predictions are ~1e-28; "sparse" is the distribution
made for it: predictions down to ~1e-36 under ordinary targets, where the reference's terms t log(t / p) are
~t * 60 and the clamp makes them ~t * 18.

expect: incorrect
task: kl_div
diagnosis: trials failed \(.*sparse
"""
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cpp = r"""
#include <cmath>
#include <algorithm>

torch::Tensor kl_clamped(torch::Tensor predictions, torch::Tensor targets) {
    auto p = predictions.contiguous(), t = targets.contiguous();
    const float *pp = p.data_ptr<float>(), *tp = t.data_ptr<float>();
    double total = 0.0;
    for (int64_t i = 0; i < p.numel(); ++i) {
        const float ti = tp[i];
        if (ti > 0.0f) total += (double)ti * (double)(std::log(ti) - std::log(std::max(pp[i], 1e-8f)));
    }
    return torch::full({}, (float)(total / (double)p.size(0)), p.options());
}
"""
ext = load_inline(name="kl_clamped_log", cpp_sources=cpp, functions=["kl_clamped"], verbose=False)


class ModelNew(nn.Module):
    def forward(self, predictions, targets):
        return ext.kl_clamped(predictions, targets)
