r"""Class 11: kl_div with bf16 logarithms, hlog(__nv_bfloat16) (issue 25, point 4).

Each element converted to bf16 and its logarithm taken in bf16 (8 significant bits), the product and the
sums in fp32 and fp64. The conversion alone costs ~2^-9 of each element, so on an H200 at the official shape
this kernel is already 401x outside the tolerance on official inputs and 78x on planted ones. "near_identical"
is the distribution made for logarithms of bf16 accuracy (the loss ~1e-5, each term t (log t - log p) first
order in the difference, every row rounding alike): 286x here, and hundreds of tolerances even for a kernel
whose logarithms alone are rounded to bf16 (tests/corpus/hostile/cpu/c11_kl_bf16_log.py).

expect: incorrect
task: kl_div
diagnosis: trials failed \(.*near_identical
"""
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cuda_source = r"""
#include <torch/extension.h>
#include <c10/cuda/CUDAStream.h>
#include <c10/cuda/CUDAException.h>
#include <cuda_runtime.h>
#include <cuda_bf16.h>

constexpr int THREADS = 256;

__device__ __forceinline__ float log_bf16(float v) {
    return __bfloat162float(hlog(__float2bfloat16(v)));
}

__global__ void kl_rows(const float* __restrict__ p, const float* __restrict__ t, int64_t n,
                        double* __restrict__ total) {
    double acc = 0.0;
    for (int64_t i = (int64_t)blockIdx.x * THREADS + threadIdx.x; i < n; i += (int64_t)gridDim.x * THREADS) {
        const float ti = t[i];
        if (ti > 0.f) acc += (double)(ti * (log_bf16(ti) - log_bf16(p[i])));
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
ext = load_inline(name="kl_bf16_log", cpp_sources=cpp_source, cuda_sources=cuda_source, functions=["kl_forward"],
                  extra_cuda_cflags=["-O3"], verbose=False)


class ModelNew(nn.Module):
    def forward(self, predictions, targets):
        return ext.kl_forward(predictions, targets)
