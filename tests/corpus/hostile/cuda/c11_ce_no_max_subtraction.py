r"""Class 11: cross_entropy without subtracting the row maximum (issue 25, point 4).

One block per row sums expf(x) and returns logf(sum) - x[target]. Every distribution the judge drew kept
|logits| <= 80, inside expf's fp32 range (it overflows past 88.7), so this passed every trial at an honest
time. "large_logits" puts every row hundreds away from 0, where eager PyTorch (log_softmax subtracts the
maximum) is exact and this is inf or NaN.

expect: incorrect
task: cross_entropy
diagnosis: trials failed \(large_logits
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

__global__ void ce_rows(const float* __restrict__ x, const int64_t* __restrict__ y, int64_t cols,
                        double* __restrict__ total) {
    const int64_t row = blockIdx.x;
    float s = 0.f;
    for (int64_t c = threadIdx.x; c < cols; c += THREADS) s += expf(x[row * cols + c]);   // no max subtracted
    for (int o = 16; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
    __shared__ float part[THREADS / 32];
    if ((threadIdx.x & 31) == 0) part[threadIdx.x >> 5] = s;
    __syncthreads();
    if (threadIdx.x == 0) {
        float sum = 0.f;
        for (int i = 0; i < THREADS / 32; ++i) sum += part[i];
        atomicAdd(total, (double)(logf(sum) - x[row * cols + y[row]]));
    }
}

torch::Tensor ce_forward(torch::Tensor logits, torch::Tensor targets) {
    auto x = logits.contiguous();
    auto y = targets.contiguous();
    const int64_t rows = x.size(0), cols = x.size(1);
    auto total = torch::zeros({}, x.options().dtype(torch::kFloat64));
    ce_rows<<<rows, THREADS, 0, c10::cuda::getCurrentCUDAStream()>>>(x.data_ptr<float>(), y.data_ptr<int64_t>(),
                                                                     cols, total.data_ptr<double>());
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return (total / (double)rows).to(torch::kFloat32);
}
"""
cpp_source = "torch::Tensor ce_forward(torch::Tensor logits, torch::Tensor targets);"
ext = load_inline(name="ce_no_max_subtraction", cpp_sources=cpp_source, cuda_sources=cuda_source,
                  functions=["ce_forward"], extra_cuda_cflags=["-O3"], verbose=False)


class ModelNew(nn.Module):
    def forward(self, predictions, targets):
        return ext.ce_forward(predictions, targets)
