r"""Training: the loss value comes from its own C++ kernel, but the gradient from PyTorch's autograd of a
surrogate made of allowed operators (max, exp, sum, log, gather): `kernel + (surrogate - surrogate.detach())`.
The backward runs no code the candidate built, and there is no custom autograd.Function.

expect: policy_violation
task: cross_entropy_train
diagnosis: own code
"""
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cpp_source = r"""
#include <cmath>

torch::Tensor ce_forward(torch::Tensor logits, torch::Tensor targets) {
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
    return torch::full({}, (float)(total / (double)rows), x.options());
}
"""

ext = load_inline(name="ce_train_torch_backward", cpp_sources=cpp_source, functions=["ce_forward"],
                  extra_cflags=["-O2"], verbose=False)


class ModelNew(nn.Module):
    def forward(self, predictions, targets):
        value = ext.ce_forward(predictions.detach(), targets)
        m = predictions.max(dim=1, keepdim=True).values.detach()
        lse = torch.log(torch.exp(predictions - m).sum(dim=1)) + m.squeeze(1)
        surrogate = (lse - predictions.gather(1, targets[:, None]).squeeze(1)).mean()
        return value + (surrogate - surrogate.detach())
