r"""Training: its own C++ loss, but the backward differentiates at::kl_div with autograd inside C++ (no
Python name for the static check to see). The tripwire on aten::kl_div must fire in the backward too.

expect: policy_violation
task: kl_div_train
diagnosis: kl_div
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

torch::Tensor kl_backward(torch::Tensor predictions, torch::Tensor targets, torch::Tensor grad_output) {
    torch::AutoGradMode enable(true);
    auto leaf = predictions.detach().requires_grad_(true);
    auto loss = at::kl_div(leaf.log(), targets, at::Reduction::Sum) / (double)predictions.size(0);
    return torch::autograd::grad({loss}, {leaf})[0] * grad_output;
}
"""

ext = load_inline(name="kl_train_reference_backward", cpp_sources=cpp_source, functions=["kl_forward", "kl_backward"],
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
