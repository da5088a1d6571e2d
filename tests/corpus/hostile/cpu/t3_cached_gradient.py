r"""Training: an honest loss every call, but the gradient is computed once and a copy of it handed back on
every later step (the step then costs a forward and a memcpy). Every step has fresh inputs and a fresh
incoming gradient, so the copy is wrong from the second step on.

expect: incorrect
task: cross_entropy_train
diagnosis: gradient
"""
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cpp_source = r"""
#include <cmath>
#include <vector>

std::vector<torch::Tensor> ce_fused(torch::Tensor logits, torch::Tensor targets) {
    auto x = logits.contiguous();
    auto t = targets.contiguous();
    auto grad = torch::empty_like(x);
    const float* xp = x.data_ptr<float>();
    const int64_t* tp = t.data_ptr<int64_t>();
    float* gp = grad.data_ptr<float>();
    const int64_t rows = x.size(0), cols = x.size(1);
    double total = 0.0;
    for (int64_t r = 0; r < rows; ++r) {
        const float* row = xp + r * cols;
        float m = row[0];
        for (int64_t c = 1; c < cols; ++c) m = std::max(m, row[c]);
        double s = 0.0;
        for (int64_t c = 0; c < cols; ++c) s += std::exp((double)(row[c] - m));
        const double lse = (double)m + std::log(s);
        total += lse - (double)row[tp[r]];
        for (int64_t c = 0; c < cols; ++c)
            gp[r * cols + c] = (float)((std::exp((double)row[c] - lse) - (c == tp[r] ? 1.0 : 0.0)) / (double)rows);
    }
    return {torch::full({}, (float)(total / (double)rows), x.options()), grad};
}
"""

ext = load_inline(name="ce_train_cached_grad", cpp_sources=cpp_source, functions=["ce_fused"],
                  extra_cflags=["-O2"], verbose=False)

_cache = {}


class CachedCrossEntropy(torch.autograd.Function):
    @staticmethod
    def forward(ctx, logits, targets):
        loss, grad = ext.ce_fused(logits, targets)
        ctx.shape = tuple(logits.shape)
        ctx.fresh = grad
        return loss

    @staticmethod
    def backward(ctx, grad_output):
        if ctx.shape not in _cache:
            _cache[ctx.shape] = ctx.fresh * grad_output
        return _cache[ctx.shape].clone(), None


class ModelNew(nn.Module):
    def forward(self, predictions, targets):
        return CachedCrossEntropy.apply(predictions, targets)
