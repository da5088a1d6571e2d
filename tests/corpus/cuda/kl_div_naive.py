"""Honest naive CUDA kl_div: one block per row, scalar loads, log t - log p, a shared-memory tree.

Correct but slower than the fused kernel: two logs per element and per-row launches of work.

expect: correct
task: kl_div
"""
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cuda_source = r"""
#include <torch/extension.h>

__global__ void kl_row(const float* p, const float* t, int64_t cols, float* row_out) {
    __shared__ float buf[256];
    const float* pr = p + blockIdx.x * cols;
    const float* tr = t + blockIdx.x * cols;
    float acc = 0.f;
    for (int64_t i = threadIdx.x; i < cols; i += blockDim.x) {
        float tv = tr[i];
        if (tv > 0.f) acc += tv * (logf(tv) - logf(pr[i]));
    }
    buf[threadIdx.x] = acc;
    __syncthreads();
    for (int s = blockDim.x / 2; s > 0; s >>= 1) {
        if (threadIdx.x < s) buf[threadIdx.x] += buf[threadIdx.x + s];
        __syncthreads();
    }
    if (threadIdx.x == 0) row_out[blockIdx.x] = buf[0];
}

__global__ void mean_rows(const float* v, int64_t n, float* out) {
    if (threadIdx.x == 0 && blockIdx.x == 0) {
        double s = 0.0;
        for (int64_t i = 0; i < n; ++i) s += v[i];
        out[0] = (float)(s / (double)n);
    }
}

torch::Tensor kl_div_forward(torch::Tensor predictions, torch::Tensor targets) {
    auto p = predictions.contiguous();
    auto t = targets.contiguous();
    const int64_t rows = p.size(0), cols = p.size(1);
    auto per_row = torch::empty({rows}, p.options());
    auto out = torch::empty({}, p.options());
    kl_row<<<rows, 256>>>(p.data_ptr<float>(), t.data_ptr<float>(), cols, per_row.data_ptr<float>());
    mean_rows<<<1, 1>>>(per_row.data_ptr<float>(), rows, out.data_ptr<float>());
    return out;
}
"""

cpp_source = "torch::Tensor kl_div_forward(torch::Tensor predictions, torch::Tensor targets);"

ext = load_inline(name="kl_div_naive", cpp_sources=cpp_source, cuda_sources=cuda_source,
                  functions=["kl_div_forward"], verbose=False)


class ModelNew(nn.Module):
    def forward(self, predictions, targets):
        return ext.kl_div_forward(predictions, targets)
