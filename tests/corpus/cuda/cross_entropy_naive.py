"""Honest naive CUDA cross_entropy: one thread per row, a max pass then a sum pass, uncoalesced.

expect: correct
task: cross_entropy
"""
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cuda_source = r"""
#include <torch/extension.h>

__global__ void ce_row(const float* x, const int64_t* target, int64_t rows, int64_t cols, float* row_out) {
    int64_t r = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (r >= rows) return;
    const float* xr = x + r * cols;
    float m = xr[0];
    for (int64_t c = 1; c < cols; ++c) m = fmaxf(m, xr[c]);
    float s = 0.f;
    for (int64_t c = 0; c < cols; ++c) s += expf(xr[c] - m);
    row_out[r] = m + logf(s) - xr[target[r]];
}

__global__ void mean_rows(const float* v, int64_t n, float* out) {
    if (threadIdx.x == 0 && blockIdx.x == 0) {
        double s = 0.0;
        for (int64_t i = 0; i < n; ++i) s += v[i];
        out[0] = (float)(s / (double)n);
    }
}

torch::Tensor cross_entropy_forward(torch::Tensor logits, torch::Tensor targets) {
    auto x = logits.contiguous();
    auto t = targets.contiguous();
    const int64_t rows = x.size(0), cols = x.size(1);
    auto per_row = torch::empty({rows}, x.options());
    auto out = torch::empty({}, x.options());
    ce_row<<<(rows + 127) / 128, 128>>>(x.data_ptr<float>(), t.data_ptr<int64_t>(), rows, cols, per_row.data_ptr<float>());
    mean_rows<<<1, 1>>>(per_row.data_ptr<float>(), rows, out.data_ptr<float>());
    return out;
}
"""

cpp_source = "torch::Tensor cross_entropy_forward(torch::Tensor logits, torch::Tensor targets);"

ext = load_inline(name="cross_entropy_naive", cpp_sources=cpp_source, cuda_sources=cuda_source,
                  functions=["cross_entropy_forward"], verbose=False)


class ModelNew(nn.Module):
    def forward(self, predictions, targets):
        return ext.cross_entropy_forward(predictions, targets)
