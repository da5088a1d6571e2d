"""As models write it: torch/extension.h included again (load_inline already put it first), a helper
function, a `functions=[...]` list, `-O3`. Honest: torch alone compiles the repeated include.

expect: correct
task: kl_div
"""
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cpp_source = r"""
#include <torch/extension.h>
#include <cmath>

static inline double kl_term(float t, float p) {
    return t > 0.0f ? (double)t * ((double)std::log(t) - (double)std::log(p)) : 0.0;
}

torch::Tensor kl_div_forward(torch::Tensor predictions, torch::Tensor targets) {
    TORCH_CHECK(predictions.sizes() == targets.sizes(), "shape mismatch");
    auto p = predictions.contiguous();
    auto t = targets.contiguous();
    const float* pp = p.data_ptr<float>();
    const float* tp = t.data_ptr<float>();
    double total = 0.0;
    for (int64_t i = 0; i < p.numel(); ++i) total += kl_term(tp[i], pp[i]);
    return torch::full({}, (float)(total / (double)p.size(0)), p.options());
}
"""

kl_div_module = load_inline(
    name="kl_div_repeated_include",
    cpp_sources=cpp_source,
    functions=["kl_div_forward"],
    extra_cflags=["-O3"],
    verbose=False,
)


class ModelNew(nn.Module):
    def __init__(self):
        super(ModelNew, self).__init__()
        self.kl_div = kl_div_module

    def forward(self, predictions, targets):
        return self.kl_div.kl_div_forward(predictions, targets)
