"""Model-style honest cross_entropy with its own PYBIND11_MODULE (no `functions=` list), two kernels.

Typical of model output: an explicit `PYBIND11_MODULE(TORCH_EXTENSION_NAME, m)` in `cpp_sources` after a
repeated `#include <torch/extension.h>`, `#pragma once` in the CUDA source, ATen's CUDA context header for the
stream, a per-row kernel (max, then sum of exp, one warp-shuffle reduction each) writing row losses, the mean
taken in PyTorch, and odd flags on both compilers (`-O3`, `--use_fast_math`, `-std=c++17`).

expect: correct
task: cross_entropy
"""
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cuda_src = r"""
#pragma once
#include <torch/extension.h>
#include <ATen/cuda/CUDAContext.h>
#include <cuda_runtime.h>
#include <float.h>

template <typename T>
__device__ __forceinline__ T warp_reduce_max(T val) {
    for (int offset = 16; offset > 0; offset /= 2) val = fmaxf(val, __shfl_down_sync(0xffffffff, val, offset));
    return val;
}

template <typename T>
__device__ __forceinline__ T warp_reduce_sum(T val) {
    for (int offset = 16; offset > 0; offset /= 2) val += __shfl_down_sync(0xffffffff, val, offset);
    return val;
}

__device__ float block_reduce_max(float val) {
    static __shared__ float shared[32];
    int lane = threadIdx.x % 32, wid = threadIdx.x / 32;
    val = warp_reduce_max(val);
    if (lane == 0) shared[wid] = val;
    __syncthreads();
    val = (threadIdx.x < blockDim.x / 32) ? shared[lane] : -FLT_MAX;
    if (wid == 0) val = warp_reduce_max(val);
    if (threadIdx.x == 0) shared[0] = val;
    __syncthreads();
    float result = shared[0];
    __syncthreads();
    return result;
}

__device__ float block_reduce_sum(float val) {
    static __shared__ float shared[32];
    int lane = threadIdx.x % 32, wid = threadIdx.x / 32;
    val = warp_reduce_sum(val);
    if (lane == 0) shared[wid] = val;
    __syncthreads();
    val = (threadIdx.x < blockDim.x / 32) ? shared[lane] : 0.0f;
    if (wid == 0) val = warp_reduce_sum(val);
    if (threadIdx.x == 0) shared[0] = val;
    __syncthreads();
    float result = shared[0];
    __syncthreads();
    return result;
}

__global__ void cross_entropy_rows(const float* __restrict__ logits, const int64_t* __restrict__ targets,
                                   float* __restrict__ row_loss, int num_classes) {
    const int row = blockIdx.x;
    const float* x = logits + (size_t)row * num_classes;
    float m = -FLT_MAX;
    for (int c = threadIdx.x; c < num_classes; c += blockDim.x) m = fmaxf(m, x[c]);
    m = block_reduce_max(m);
    float s = 0.0f;
    for (int c = threadIdx.x; c < num_classes; c += blockDim.x) s += expf(x[c] - m);
    s = block_reduce_sum(s);
    if (threadIdx.x == 0) {
        const int64_t t = targets[row];
        row_loss[row] = logf(s) + m - x[t];
    }
}

torch::Tensor cross_entropy_forward(torch::Tensor predictions, torch::Tensor targets) {
    TORCH_CHECK(predictions.is_cuda(), "predictions must be CUDA");
    auto logits = predictions.contiguous();
    auto tgt = targets.contiguous();
    const int batch = logits.size(0), num_classes = logits.size(1);
    auto row_loss = torch::empty({batch}, logits.options());
    auto stream = at::cuda::getCurrentCUDAStream();
    cross_entropy_rows<<<batch, 256, 0, stream>>>(logits.data_ptr<float>(), tgt.data_ptr<int64_t>(),
                                                   row_loss.data_ptr<float>(), num_classes);
    return row_loss;
}
"""

cpp_src = r"""
#include <torch/extension.h>

torch::Tensor cross_entropy_forward(torch::Tensor predictions, torch::Tensor targets);

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
    m.def("forward", &cross_entropy_forward, "Cross entropy row losses (CUDA)");
}
"""

ce_module = load_inline(
    name="cross_entropy_custom",
    cpp_sources=cpp_src,
    cuda_sources=cuda_src,
    extra_cflags=["-O3", "-std=c++17"],
    extra_cuda_cflags=["-O3", "--use_fast_math"],
    verbose=False,
)


class ModelNew(nn.Module):
    """Cross entropy with a custom CUDA kernel."""

    def __init__(self):
        super().__init__()

    def forward(self, predictions, targets):
        row_loss = ce_module.forward(predictions, targets)
        return row_loss.mean()
