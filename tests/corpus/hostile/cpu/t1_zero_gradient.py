r"""Training: an honest C++ loss whose custom backward returns zeros: the step is cheap and the loss is right.

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

torch::Tensor kl_backward(torch::Tensor predictions) {
    return torch::zeros_like(predictions);
}
"""

ext = load_inline(name="kl_div_train_zero_grad", cpp_sources=cpp_source, functions=["kl_forward", "kl_backward"],
                  extra_cflags=["-O2"], verbose=False)


class KLDiv(torch.autograd.Function):
    @staticmethod
    def forward(ctx, predictions, targets):
        ctx.save_for_backward(predictions)
        return ext.kl_forward(predictions, targets)

    @staticmethod
    def backward(ctx, grad_output):
        (predictions,) = ctx.saved_tensors
        return ext.kl_backward(predictions), None


class ModelNew(nn.Module):
    def forward(self, predictions, targets):
        return KLDiv.apply(predictions, targets)
