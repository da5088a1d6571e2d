"""The fake model's kernels: one honest candidate per (task, prompt language), as tests/corpus holds them.

The C++ ones run on a CPU host (the judge builds them with torch's cpp extension, as `prompt --language cpp`
asks); the CUDA ones need a GPU worker. A broken variant adds a line that uses an undeclared identifier, the
commonest compile error of LLM-written kernels, so the judge's diagnosis names it.
"""

from __future__ import annotations

KL_DIV_CPP = '''import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cpp_source = r"""
#include <cmath>

torch::Tensor kl_div_forward(torch::Tensor predictions, torch::Tensor targets) {
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
"""

kl_ext = load_inline(name="kl_div_cpu", cpp_sources=cpp_source, functions=["kl_div_forward"],
                     extra_cflags=["-O2"], verbose=False)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, predictions, targets):
        return kl_ext.kl_div_forward(predictions, targets)
'''

CROSS_ENTROPY_CPP = '''import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cpp_source = r"""
#include <cmath>

torch::Tensor cross_entropy_forward(torch::Tensor logits, torch::Tensor targets) {
    auto x = logits.contiguous();
    auto t = targets.contiguous();
    const float* xp = x.data_ptr<float>();
    const int64_t* tp = t.data_ptr<int64_t>();
    const int64_t rows = x.size(0), cols = x.size(1);
    double total = 0.0;
    for (int64_t r = 0; r < rows; ++r) {
        const float* row = xp + r * cols;
        float m = row[0];
        for (int64_t c = 1; c < cols; ++c) m = std::max(m, row[c]);
        double s = 0.0;
        for (int64_t c = 0; c < cols; ++c) s += std::exp((double)(row[c] - m));
        total += (double)m + std::log(s) - (double)row[tp[r]];
    }
    return torch::full({}, (float)(total / (double)rows), x.options());
}
"""

ce_ext = load_inline(name="cross_entropy_cpu", cpp_sources=cpp_source, functions=["cross_entropy_forward"],
                     extra_cflags=["-O2"], verbose=False)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, predictions, targets):
        return ce_ext.cross_entropy_forward(predictions, targets)
'''

KL_DIV_CUDA = '''import torch
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
'''

CROSS_ENTROPY_CUDA = '''import torch
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
    ce_row<<<(rows + 127) / 128, 128>>>(x.data_ptr<float>(), t.data_ptr<int64_t>(), rows, cols,
                                        per_row.data_ptr<float>());
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
'''

KERNELS: dict[tuple[str, str], str] = {
    ("kl_div", "cpp"): KL_DIV_CPP, ("cross_entropy", "cpp"): CROSS_ENTROPY_CPP,
    ("kl_div", "cuda"): KL_DIV_CUDA, ("cross_entropy", "cuda"): CROSS_ENTROPY_CUDA,
}
"""(task id, prompt language) -> an honest candidate module."""

UNDECLARED = "static float scale_of(int64_t i) { return (float)i * undeclared_scale; }\n"
"""The broken variant's extra line: `undeclared_scale` is declared nowhere, so the build fails on it."""


def broken(kernel: str) -> str:
    """The kernel with a line using an undeclared identifier at the top of its first C++ source."""
    head, opening, rest = kernel.partition('_source = r"""\n')
    return head + opening + UNDECLARED + rest
