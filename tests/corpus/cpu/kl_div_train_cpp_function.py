"""An honest C++ kl_div training candidate (CPU): a torch.autograd.Function with its own backward kernel.

Forward: sum(t * (log t - log p)) / batch with fp64 accumulation. Backward: its own kernel writes
grad_output * -t / (p * batch) into a fresh tensor.

expect: correct
task: kl_div_train
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
    const int64_t n = p.numel();
    double total = 0.0;
    for (int64_t i = 0; i < n; ++i) {
        const float ti = tp[i];
        if (ti > 0.0f) total += (double)ti * (double)(std::log(ti) - std::log(pp[i]));
    }
    return torch::full({}, (float)(total / (double)p.size(0)), p.options());
}

torch::Tensor kl_backward(torch::Tensor predictions, torch::Tensor targets, torch::Tensor grad_output) {
    auto p = predictions.contiguous();
    auto t = targets.contiguous();
    auto grad = torch::empty_like(p);
    const float* pp = p.data_ptr<float>();
    const float* tp = t.data_ptr<float>();
    float* gp = grad.data_ptr<float>();
    const float scale = grad_output.item<float>() / (float)p.size(0);
    const int64_t n = p.numel();
    for (int64_t i = 0; i < n; ++i) gp[i] = -scale * (tp[i] / pp[i]);
    return grad;
}
"""

ext = load_inline(name="kl_div_train_function_cpu", cpp_sources=cpp_source, functions=["kl_forward", "kl_backward"],
                  extra_cflags=["-O2"], verbose=False)


class KLDiv(torch.autograd.Function):
    @staticmethod
    def forward(ctx, predictions, targets):
        ctx.save_for_backward(predictions, targets)
        return ext.kl_forward(predictions, targets)

    @staticmethod
    def backward(ctx, grad_output):
        predictions, targets = ctx.saved_tensors
        return ext.kl_backward(predictions, targets, grad_output), None


class ModelNew(nn.Module):
    def forward(self, predictions, targets):
        return KLDiv.apply(predictions, targets)
