r"""Training: the loss is honest, but the backward computes the gradient of every other row only and
copies it into the row below (half the backward's exp work). Every row is checked through a projection
on weights drawn after the step, so the copied rows are found.

expect: incorrect
task: cross_entropy_train
diagnosis: gradient is wrong in \d+ of \d+ rows
"""
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cpp_source = r"""
#include <cmath>
#include <vector>

std::vector<torch::Tensor> ce_forward(torch::Tensor logits, torch::Tensor targets) {
    auto x = logits.contiguous();
    auto t = targets.contiguous();
    const float* xp = x.data_ptr<float>();
    const int64_t* tp = t.data_ptr<int64_t>();
    const int64_t rows = x.size(0), cols = x.size(1);
    auto lse = torch::empty({rows}, x.options().dtype(torch::kFloat64));
    double* lp = lse.data_ptr<double>();
    double total = 0.0;
    for (int64_t r = 0; r < rows; ++r) {
        const float* row = xp + r * cols;
        float m = row[0];
        for (int64_t c = 1; c < cols; ++c) m = std::max(m, row[c]);
        double s = 0.0;
        for (int64_t c = 0; c < cols; ++c) s += std::exp((double)(row[c] - m));
        lp[r] = (double)m + std::log(s);
        total += lp[r] - (double)row[tp[r]];
    }
    return {torch::full({}, (float)(total / (double)rows), x.options()), lse};
}

torch::Tensor ce_backward_half(torch::Tensor logits, torch::Tensor targets, torch::Tensor lse, torch::Tensor grad_output) {
    auto x = logits.contiguous();
    auto t = targets.contiguous();
    auto grad = torch::empty_like(x);
    const float* xp = x.data_ptr<float>();
    const int64_t* tp = t.data_ptr<int64_t>();
    const double* lp = lse.data_ptr<double>();
    float* gp = grad.data_ptr<float>();
    const int64_t rows = x.size(0), cols = x.size(1);
    const double scale = (double)grad_output.item<float>() / (double)rows;
    for (int64_t r = 0; r < rows; r += 2) {
        for (int64_t c = 0; c < cols; ++c)
            gp[r * cols + c] = (float)(scale * (std::exp((double)xp[r * cols + c] - lp[r]) - (c == tp[r] ? 1.0 : 0.0)));
        if (r + 1 < rows)
            for (int64_t c = 0; c < cols; ++c) gp[(r + 1) * cols + c] = gp[r * cols + c];
    }
    return grad;
}
"""

ext = load_inline(name="ce_train_half_rows", cpp_sources=cpp_source, functions=["ce_forward", "ce_backward_half"],
                  extra_cflags=["-O2"], verbose=False)


class CrossEntropy(torch.autograd.Function):
    @staticmethod
    def forward(ctx, logits, targets):
        loss, lse = ext.ce_forward(logits, targets)
        ctx.save_for_backward(logits, targets, lse)
        return loss

    @staticmethod
    def backward(ctx, grad_output):
        logits, targets, lse = ctx.saved_tensors
        return ext.ce_backward_half(logits, targets, lse, grad_output), None


class ModelNew(nn.Module):
    def forward(self, predictions, targets):
        return CrossEntropy.apply(predictions, targets)
