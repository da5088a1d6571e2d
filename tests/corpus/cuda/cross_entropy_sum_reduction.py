"""The sum of the row losses instead of their mean.

expect: incorrect
task: cross_entropy
diagnosis: trials failed
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

struct MaxSum { float m; float s; };

__device__ __forceinline__ MaxSum merge(MaxSum a, MaxSum b) {
    if (a.m < b.m) { MaxSum t = a; a = b; b = t; }
    if (b.m == -INFINITY) return a;
    return {a.m, a.s + b.s * __expf(b.m - a.m)};
}

__device__ __forceinline__ void push(MaxSum& acc, float x) {
    if (x > acc.m) { acc.s = acc.s * __expf(acc.m - x) + 1.f; acc.m = x; }
    else acc.s += __expf(x - acc.m);
}

__global__ void __launch_bounds__(THREADS) ce_rows(const float* __restrict__ x, const int64_t* __restrict__ target,
                                                   int64_t cols, bool vec, float* __restrict__ row_loss) {
    const int64_t row = blockIdx.x;
    const float* xr = x + row * cols;
    MaxSum acc{-INFINITY, 0.f};
    if (vec) {
        const float4* xv = reinterpret_cast<const float4*>(xr);
        const int64_t n4 = cols / 4;
        int64_t i = threadIdx.x;
        for (; i + THREADS < n4; i += 2 * THREADS) {
            const float4 a = __ldcs(xv + i), b = __ldcs(xv + i + THREADS);
            push(acc, a.x); push(acc, a.y); push(acc, a.z); push(acc, a.w);
            push(acc, b.x); push(acc, b.y); push(acc, b.z); push(acc, b.w);
        }
        for (; i < n4; i += THREADS) {
            const float4 a = __ldcs(xv + i);
            push(acc, a.x); push(acc, a.y); push(acc, a.z); push(acc, a.w);
        }
    } else {
        for (int64_t i = threadIdx.x; i < cols; i += THREADS) push(acc, xr[i]);
    }
    for (int o = 16; o > 0; o >>= 1) {
        MaxSum other{__shfl_xor_sync(0xffffffff, acc.m, o), __shfl_xor_sync(0xffffffff, acc.s, o)};
        acc = merge(acc, other);
    }
    __shared__ MaxSum warps[THREADS / 32];
    if ((threadIdx.x & 31) == 0) warps[threadIdx.x >> 5] = acc;
    __syncthreads();
    if (threadIdx.x == 0) {
        MaxSum total = warps[0];
        for (int w = 1; w < THREADS / 32; ++w) total = merge(total, warps[w]);
        row_loss[row] = total.m + logf(total.s) - xr[target[row]];
    }
}

__global__ void mean_finish(const float* __restrict__ v, int64_t n, float* __restrict__ out) {
    __shared__ double sums[1024];
    double acc = 0.0;
    for (int64_t i = threadIdx.x; i < n; i += blockDim.x) acc += (double)v[i];
    sums[threadIdx.x] = acc;
    __syncthreads();
    for (int s = blockDim.x / 2; s > 0; s >>= 1) {
        if (threadIdx.x < s) sums[threadIdx.x] += sums[threadIdx.x + s];
        __syncthreads();
    }
    if (threadIdx.x == 0) out[0] = (float)sums[0];
}

torch::Tensor cross_entropy_forward(torch::Tensor logits, torch::Tensor targets) {
    TORCH_CHECK(logits.is_cuda() && logits.dim() == 2, "logits must be a 2-D CUDA tensor");
    auto x = logits.contiguous().to(torch::kFloat32);
    auto t = targets.contiguous().to(torch::kInt64);
    const int64_t rows = x.size(0), cols = x.size(1);
    auto stream = c10::cuda::getCurrentCUDAStream();
    const bool vec = cols % 4 == 0 && reinterpret_cast<uintptr_t>(x.data_ptr()) % 16 == 0;
    auto losses = torch::empty({rows}, x.options());
    auto out = torch::empty({}, x.options());
    ce_rows<<<rows, THREADS, 0, stream>>>(x.data_ptr<float>(), t.data_ptr<int64_t>(), cols, vec, losses.data_ptr<float>());
    mean_finish<<<1, 1024, 0, stream>>>(losses.data_ptr<float>(), rows, out.data_ptr<float>());
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return out;
}
"""

cpp_source = "torch::Tensor cross_entropy_forward(torch::Tensor logits, torch::Tensor targets);"

ce_ext = load_inline(name="cross_entropy_sum", cpp_sources=cpp_source, cuda_sources=cuda_source,
                     functions=["cross_entropy_forward"], extra_cuda_cflags=["-O3"], verbose=False)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, predictions, targets):
        return ce_ext.cross_entropy_forward(predictions, targets)
