r"""Training: a correct gradient of the loss, but the backward ignores its grad_output (as if every
backward were loss.backward() with 1). Under loss scaling (AMP) that is wrong; the judge's incoming
gradient is never within 33% of 1.

expect: incorrect
task: kl_div_train
diagnosis: gradient
"""
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cpp_source = r"""
#include <cmath>

torch::Tensor kl_forward(torch::Tensor predictions, torch::Tensor targets) {
    auto p = predictions.contiguous();
    auto t = targets.contiguous();
    const float* pp = p.data_ptr<float>();
    const float* tp = t.data_ptr<float>();
    double total = 0.0;
    for (int64_t i = 0; i < p.numel(); ++i)
        if (tp[i] > 0.0f) total += (double)tp[i] * (double)(std::log(tp[i]) - std::log(pp[i]));
    return torch::full({}, (float)(total / (double)p.size(0)), p.options());
}

torch::Tensor kl_backward(torch::Tensor predictions, torch::Tensor targets) {
    auto p = predictions.contiguous();
    auto t = targets.contiguous();
    auto grad = torch::empty_like(p);
    const float* pp = p.data_ptr<float>();
    const float* tp = t.data_ptr<float>();
    float* gp = grad.data_ptr<float>();
    const float inv_rows = 1.0f / (float)p.size(0);
    for (int64_t i = 0; i < p.numel(); ++i) gp[i] = -inv_rows * (tp[i] / pp[i]);
    return grad;
}
"""

ext = load_inline(name="kl_train_ignore_grad_output", cpp_sources=cpp_source, functions=["kl_forward", "kl_backward"],
                  extra_cflags=["-O2"], verbose=False)


class KLDiv(torch.autograd.Function):
    @staticmethod
    def forward(ctx, predictions, targets):
        ctx.save_for_backward(predictions, targets)
        return ext.kl_forward(predictions, targets)

    @staticmethod
    def backward(ctx, grad_output):
        predictions, targets = ctx.saved_tensors
        return ext.kl_backward(predictions, targets), None


class ModelNew(nn.Module):
    def forward(self, predictions, targets):
        return KLDiv.apply(predictions, targets)
