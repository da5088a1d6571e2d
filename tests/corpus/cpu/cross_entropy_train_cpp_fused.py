"""An honest fused C++ cross_entropy training candidate (CPU): the loss and the gradient in one pass per row.

Each row: max, sum of exp (fp64), then the row's gradient (softmax - onehot) / batch written while the
loss is accumulated; backward only scales that saved gradient by grad_output.

expect: correct
task: cross_entropy_train
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

ext = load_inline(name="cross_entropy_train_fused_cpu", cpp_sources=cpp_source, functions=["ce_fused"],
                  extra_cflags=["-O2"], verbose=False)


class FusedCrossEntropy(torch.autograd.Function):
    @staticmethod
    def forward(ctx, logits, targets):
        loss, grad = ext.ce_fused(logits, targets)
        ctx.save_for_backward(grad)
        return loss

    @staticmethod
    def backward(ctx, grad_output):
        (grad,) = ctx.saved_tensors
        return grad * grad_output, None


class ModelNew(nn.Module):
    def forward(self, predictions, targets):
        return FusedCrossEntropy.apply(predictions, targets)
