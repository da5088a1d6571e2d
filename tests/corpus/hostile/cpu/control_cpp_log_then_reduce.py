"""Honest control: torch.log in Python, the weighted reduction in a C++ extension.

expect: correct
task: kl_div
"""
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cpp = r"""
torch::Tensor weighted_diff_sum(torch::Tensor log_t, torch::Tensor log_p, torch::Tensor t) {
    auto a = log_t.contiguous(), b = log_p.contiguous(), w = t.contiguous();
    const float *ap = a.data_ptr<float>(), *bp = b.data_ptr<float>(), *wp = w.data_ptr<float>();
    double total = 0.0;
    for (int64_t i = 0; i < a.numel(); ++i)  // a zero target adds 0 (xlogy), as in the reference: log 0 = -inf
        if (wp[i] > 0.0f) total += (double)wp[i] * (double)(ap[i] - bp[i]);
    return torch::full({}, (float)(total / (double)a.size(0)), a.options());
}
"""
ext = load_inline(name="kl_weighted_sum", cpp_sources=cpp, functions=["weighted_diff_sum"], verbose=False)


class ModelNew(nn.Module):
    def forward(self, predictions, targets):
        return ext.weighted_diff_sum(torch.log(targets), torch.log(predictions), targets)
