r"""Class 10: reads every target but ~0.1% of the predictions and estimates the rest (issue 25, point 3).

The kernel of the issue: on official-looking inputs (64 sampled values of each input in the official ranges)
one block per row reads all the targets, the predictions at every 1024th column and wherever a target is
large (where the old planted rows hid their loss: a raised target over a pushed-down prediction), and takes
the other predictions from the official law, softmax(s U) with s fitted to the predictions it read. Anything
else gets the honest kernel. Before issue 25 that was inside the tolerance on the official and the planted
inputs (the timed ones) while reading about half the bytes. The planted inputs now hide pushed-down
predictions where the targets are ordinary (scripts/experiments/predictability.py: an estimator of this
kind misses by hundreds of tolerances at 0.1% read); the paired planted trial (same targets, fresh
predictions) gets the same kind of estimate for a different truth.

expect: (incorrect|tamper_detected)
task: kl_div
diagnosis: (trials failed|timed call)
"""
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cuda_source = r"""
#include <torch/extension.h>
#include <c10/cuda/CUDAStream.h>
#include <c10/cuda/CUDAException.h>
#include <cuda_runtime.h>
#include <cmath>

constexpr int THREADS = 256;

__device__ double block_sum(double v) {
    __shared__ double part[THREADS / 32];
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    if ((threadIdx.x & 31) == 0) part[threadIdx.x >> 5] = v;
    __syncthreads();
    v = threadIdx.x < THREADS / 32 ? part[threadIdx.x] : 0.0;
    if (threadIdx.x < 32)
        for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    __syncthreads();
    return v;
}

// Per row: the range of log p over the columns read (c % stride == row % stride), scaled to estimate s.
__global__ void fit_scale(const float* __restrict__ p, int64_t cols, int64_t stride, double* __restrict__ acc) {
    const int64_t row = blockIdx.x;
    float lo = INFINITY, hi = -INFINITY;
    int n = 0;
    for (int64_t c = row % stride + (int64_t)threadIdx.x * stride; c < cols; c += (int64_t)THREADS * stride, ++n) {
        const float v = logf(p[row * cols + c]);
        lo = fminf(lo, v); hi = fmaxf(hi, v);
    }
    __shared__ float slo[THREADS], shi[THREADS];
    __shared__ int sn[THREADS];
    slo[threadIdx.x] = lo; shi[threadIdx.x] = hi; sn[threadIdx.x] = n;
    __syncthreads();
    if (threadIdx.x == 0) {
        int total = 0;
        for (int i = 0; i < THREADS; ++i) { lo = fminf(lo, slo[i]); hi = fmaxf(hi, shi[i]); total += sn[i]; }
        if (total >= 2) {
            atomicAdd(acc, (double)(hi - lo) * (total + 1) / (total - 1));
            atomicAdd(acc + 1, 1.0);
        }
    }
}

// Per row: all of t log t; t log p read where c % stride == row % stride or t * cols > 1.8, else estimated.
__global__ void estimate(const float* __restrict__ p, const float* __restrict__ t, int64_t cols, int64_t stride,
                         const double* __restrict__ fit, double* __restrict__ total) {
    const int64_t row = blockIdx.x;
    const double s = fmax(1e-6, fit[0] / fmax(fit[1], 1.0));
    const double expected = s / 2 - log((double)cols * expm1(s) / s);
    double acc = 0.0;
    for (int64_t c = threadIdx.x; c < cols; c += THREADS) {
        const float ti = t[row * cols + c];
        if (ti <= 0.f) continue;
        const bool read = c % stride == row % stride || ti * (float)cols > 1.8f;
        acc += (double)ti * ((double)logf(ti) - (read ? (double)logf(p[row * cols + c]) : expected));
    }
    acc = block_sum(acc);
    if (threadIdx.x == 0) atomicAdd(total, acc);
}

__global__ void honest(const float* __restrict__ p, const float* __restrict__ t, int64_t cols,
                       double* __restrict__ total) {
    const int64_t row = blockIdx.x;
    double acc = 0.0;
    for (int64_t c = threadIdx.x; c < cols; c += THREADS) {
        const float ti = t[row * cols + c];
        if (ti > 0.f) acc += (double)(ti * logf(ti / p[row * cols + c]));
    }
    acc = block_sum(acc);
    if (threadIdx.x == 0) atomicAdd(total, acc);
}

torch::Tensor kl_forward(torch::Tensor predictions, torch::Tensor targets, bool shortcut) {
    auto p = predictions.contiguous(), t = targets.contiguous();
    const int64_t rows = p.size(0), cols = p.size(1), stride = 1024;
    auto acc = torch::zeros({3}, p.options().dtype(torch::kFloat64));
    auto stream = c10::cuda::getCurrentCUDAStream();
    double* a = acc.data_ptr<double>();
    if (shortcut) {
        fit_scale<<<rows, THREADS, 0, stream>>>(p.data_ptr<float>(), cols, stride, a);
        estimate<<<rows, THREADS, 0, stream>>>(p.data_ptr<float>(), t.data_ptr<float>(), cols, stride, a, a + 2);
    } else {
        honest<<<rows, THREADS, 0, stream>>>(p.data_ptr<float>(), t.data_ptr<float>(), cols, a + 2);
    }
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return (acc[2] / (double)rows).to(torch::kFloat32);
}
"""
cpp_source = "torch::Tensor kl_forward(torch::Tensor predictions, torch::Tensor targets, bool shortcut);"
ext = load_inline(name="kl_all_targets_few_predictions", cpp_sources=cpp_source, cuda_sources=cuda_source,
                  functions=["kl_forward"], extra_cuda_cflags=["-O3"], verbose=False)


def _looks_official(p: torch.Tensor, t: torch.Tensor) -> bool:
    dim = p.shape[1]
    idx = torch.arange(64, device=p.device) * (p.numel() // 64)
    tv, pv = t.flatten()[idx] * dim, p.flatten()[idx] * dim
    return bool((tv > 0.5).all() and (tv < 1.7).all() and (pv > 0.3).all() and (pv < 3.0).all())


class ModelNew(nn.Module):
    def forward(self, predictions, targets):
        return ext.kl_forward(predictions, targets, _looks_official(predictions, targets))
