"""An honest fused C++ kl_div training candidate (CPU): one pass computes the loss and the gradient.

The forward kernel writes -t / (p * batch) while it accumulates the loss; backward only scales that saved
gradient by grad_output (a PyTorch multiply: the gradient itself came from the candidate's kernel).

expect: correct
task: kl_div_train
"""
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cpp_source = r"""
#include <cmath>
#include <vector>

std::vector<torch::Tensor> kl_fused(torch::Tensor predictions, torch::Tensor targets) {
    auto p = predictions.contiguous();
    auto t = targets.contiguous();
    auto grad = torch::empty_like(p);
    const float* pp = p.data_ptr<float>();
    const float* tp = t.data_ptr<float>();
    float* gp = grad.data_ptr<float>();
    const int64_t n = p.numel();
    const float inv_rows = 1.0f / (float)p.size(0);
    double total = 0.0;
    for (int64_t i = 0; i < n; ++i) {
        const float ti = tp[i], pi = pp[i];
        if (ti > 0.0f) total += (double)ti * (double)(std::log(ti) - std::log(pi));
        gp[i] = -(ti / pi) * inv_rows;
    }
    return {torch::full({}, (float)(total / (double)p.size(0)), p.options()), grad};
}
"""

ext = load_inline(name="kl_div_train_fused_cpu", cpp_sources=cpp_source, functions=["kl_fused"],
                  extra_cflags=["-O2"], verbose=False)


class FusedKLDiv(torch.autograd.Function):
    @staticmethod
    def forward(ctx, predictions, targets):
        loss, grad = ext.kl_fused(predictions, targets)
        ctx.save_for_backward(grad)
        return loss

    @staticmethod
    def backward(ctx, grad_output):
        (grad,) = ctx.saved_tensors
        return grad * grad_output, None


class ModelNew(nn.Module):
    def forward(self, predictions, targets):
        return FusedKLDiv.apply(predictions, targets)
