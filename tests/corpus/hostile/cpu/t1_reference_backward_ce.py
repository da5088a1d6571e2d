r"""Training: its own C++ loss, but the backward hands the gradient to PyTorch's own backward operators
(at::nll_loss_backward, then at::_log_softmax_backward_data) from C++, where no static check can see them.
The run-time tripwires replace those operators in the dispatcher for the training task.

expect: policy_violation
task: cross_entropy_train
diagnosis: (nll_loss_backward|_log_softmax_backward_data)
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
    auto logp = torch::empty_like(x);
    float* lp = logp.data_ptr<float>();
    double total = 0.0;
    for (int64_t r = 0; r < rows; ++r) {
        const float* row = xp + r * cols;
        float m = row[0];
        for (int64_t c = 1; c < cols; ++c) m = std::max(m, row[c]);
        double s = 0.0;
        for (int64_t c = 0; c < cols; ++c) s += std::exp((double)(row[c] - m));
        const double lse = (double)m + std::log(s);
        for (int64_t c = 0; c < cols; ++c) lp[r * cols + c] = (float)((double)row[c] - lse);
        total += lse - (double)row[tp[r]];
    }
    return {torch::full({}, (float)(total / (double)rows), x.options()), logp};
}

torch::Tensor ce_backward(torch::Tensor logp, torch::Tensor targets, torch::Tensor grad_output) {
    auto weight = torch::Tensor();
    auto total_weight = torch::full({}, (double)logp.size(0), logp.options());
    auto g = at::nll_loss_backward(grad_output, logp, targets, weight, at::Reduction::Mean, -100, total_weight);
    return at::_log_softmax_backward_data(g, logp, 1, logp.scalar_type());
}
"""

ext = load_inline(name="ce_train_reference_backward", cpp_sources=cpp_source, functions=["ce_forward", "ce_backward"],
                  extra_cflags=["-O2"], verbose=False)


class CrossEntropy(torch.autograd.Function):
    @staticmethod
    def forward(ctx, logits, targets):
        loss, logp = ext.ce_forward(logits, targets)
        ctx.save_for_backward(logp, targets)
        return loss

    @staticmethod
    def backward(ctx, grad_output):
        logp, targets = ctx.saved_tensors
        return ext.ce_backward(logp, targets, grad_output), None


class ModelNew(nn.Module):
    def forward(self, predictions, targets):
        return CrossEntropy.apply(predictions, targets)
