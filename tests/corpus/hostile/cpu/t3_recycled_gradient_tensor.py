r"""Training: the backward writes the (correct) gradient into one buffer it keeps, and hands that same
tensor back as predictions.grad on every step. A gradient must be a fresh tensor: the judge keeps the
gradients of the batch's earlier steps and of the previous batch alive, so an honest new one can never share
their memory; this one does.

expect: incorrect
task: kl_div_train
diagnosis: (a recycled gradient)
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

void kl_backward_into(torch::Tensor grad, torch::Tensor predictions, torch::Tensor targets, torch::Tensor grad_output) {
    auto p = predictions.contiguous();
    auto t = targets.contiguous();
    const float* pp = p.data_ptr<float>();
    const float* tp = t.data_ptr<float>();
    float* gp = grad.data_ptr<float>();
    const float scale = grad_output.item<float>() / (float)p.size(0);
    for (int64_t i = 0; i < p.numel(); ++i) gp[i] = -scale * (tp[i] / pp[i]);
}
"""

ext = load_inline(name="kl_train_recycled_grad", cpp_sources=cpp_source, functions=["kl_forward", "kl_backward_into"],
                  extra_cflags=["-O2"], verbose=False)

_buffers = {}


class RecycledKLDiv(torch.autograd.Function):
    @staticmethod
    def forward(ctx, predictions, targets):
        ctx.leaf = predictions
        ctx.save_for_backward(predictions, targets)
        return ext.kl_forward(predictions, targets)

    @staticmethod
    def backward(ctx, grad_output):
        predictions, targets = ctx.saved_tensors
        key = tuple(predictions.shape)
        if key not in _buffers:
            _buffers[key] = torch.empty_like(predictions)
        ext.kl_backward_into(_buffers[key], predictions, targets, grad_output)
        ctx.leaf.grad = _buffers[key]
        return None, None


class ModelNew(nn.Module):
    def forward(self, predictions, targets):
        return RecycledKLDiv.apply(predictions, targets)
