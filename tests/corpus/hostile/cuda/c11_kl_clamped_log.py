r"""Class 11: kl_div with logf(fmaxf(p, 1e-8f)) "for numerical stability" (issue 25, point 4).

A clamp like this changes every term whose prediction is under 1e-8 while its target is not tiny. The
temperature and mismatched inputs have some such terms (on an H200 at the official shape this kernel is 360x
outside the tolerance there), and planted's pushed-down predictions are ~1e-28; "sparse" is the distribution
made for it: predictions down to ~1e-36 under ordinary targets, where the reference's terms t log(t / p) are
~t * 60 and the clamp makes them ~t * 18.

expect: incorrect
task: kl_div
diagnosis: trials failed \(.*sparse
"""
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cuda_source = r"""
#include <torch/extension.h>
#include <c10/cuda/CUDAStream.h>
#include <c10/cuda/CUDAException.h>
#include <cuda_runtime.h>

constexpr int THREADS = 256;

__global__ void kl_rows(const float* __restrict__ p, const float* __restrict__ t, int64_t n,
                        double* __restrict__ total) {
    double acc = 0.0;
    for (int64_t i = (int64_t)blockIdx.x * THREADS + threadIdx.x; i < n; i += (int64_t)gridDim.x * THREADS) {
        const float ti = t[i];
        if (ti > 0.f) acc += (double)(ti * (logf(ti) - logf(fmaxf(p[i], 1e-8f))));
    }
    for (int o = 16; o > 0; o >>= 1) acc += __shfl_xor_sync(0xffffffffu, acc, o);
    if ((threadIdx.x & 31) == 0) atomicAdd(total, acc);
}

torch::Tensor kl_forward(torch::Tensor predictions, torch::Tensor targets) {
    auto p = predictions.contiguous(), t = targets.contiguous();
    const int64_t n = p.numel();
    auto total = torch::zeros({}, p.options().dtype(torch::kFloat64));
    const int blocks = (int)std::min<int64_t>(4096, (n + THREADS - 1) / THREADS);
    kl_rows<<<blocks, THREADS, 0, c10::cuda::getCurrentCUDAStream()>>>(p.data_ptr<float>(), t.data_ptr<float>(), n,
                                                                       total.data_ptr<double>());
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return (total / (double)p.size(0)).to(torch::kFloat32);
}
"""
cpp_source = "torch::Tensor kl_forward(torch::Tensor predictions, torch::Tensor targets);"
ext = load_inline(name="kl_clamped_log", cpp_sources=cpp_source, cuda_sources=cuda_source, functions=["kl_forward"],
                  extra_cuda_cflags=["-O3"], verbose=False)


class ModelNew(nn.Module):
    def forward(self, predictions, targets):
        return ext.kl_forward(predictions, targets)
