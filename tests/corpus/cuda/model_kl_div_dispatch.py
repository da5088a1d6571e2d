"""Model-style honest kl_div: sources as lists, a standard header before torch's, AT_DISPATCH, two functions.

Typical of model output: `cpp_sources` and `cuda_sources` passed as lists, `#include <vector>` ahead of a
repeated `#include <torch/extension.h>`, `AT_DISPATCH_FLOATING_TYPES`, a grid-stride loop over the flattened
inputs with per-block partial sums (fp64 atomics), a second bound function the model never calls, and
`extra_cuda_cflags=["-O3", "-lineinfo", "-Xptxas", "-O3"]`.

expect: correct
task: kl_div
"""
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cuda_sources = ["""
#include <vector>
#include <torch/extension.h>
#include <cuda_runtime.h>

template <typename scalar_t>
__global__ void kl_div_partial_kernel(const scalar_t* __restrict__ p, const scalar_t* __restrict__ t,
                                      double* __restrict__ total, int64_t n) {
    __shared__ double cache[256];
    double acc = 0.0;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
        const float tv = static_cast<float>(t[i]);
        if (tv > 0.0f) acc += (double)(tv * (logf(tv) - logf(static_cast<float>(p[i]))));
    }
    cache[threadIdx.x] = acc;
    __syncthreads();
    for (int s = blockDim.x / 2; s > 0; s >>= 1) {
        if (threadIdx.x < s) cache[threadIdx.x] += cache[threadIdx.x + s];
        __syncthreads();
    }
    if (threadIdx.x == 0) atomicAdd(total, cache[0]);
}

torch::Tensor kl_div_batchmean(torch::Tensor predictions, torch::Tensor targets) {
    auto p = predictions.contiguous();
    auto t = targets.contiguous();
    const int64_t n = p.numel();
    auto total = torch::zeros({}, p.options().dtype(torch::kFloat64));
    const int threads = 256;
    const int blocks = (int)std::min<int64_t>((n + threads - 1) / threads, 132 * 16);
    AT_DISPATCH_FLOATING_TYPES(p.scalar_type(), "kl_div_batchmean", ([&] {
        kl_div_partial_kernel<scalar_t><<<blocks, threads>>>(p.data_ptr<scalar_t>(), t.data_ptr<scalar_t>(),
                                                             total.data_ptr<double>(), n);
    }));
    return (total / (double)p.size(0)).to(p.scalar_type());
}

std::vector<int64_t> kl_div_shape(torch::Tensor predictions) {
    return predictions.sizes().vec();
}
"""]

cpp_sources = ["""
#include <vector>
#include <torch/extension.h>
torch::Tensor kl_div_batchmean(torch::Tensor predictions, torch::Tensor targets);
std::vector<int64_t> kl_div_shape(torch::Tensor predictions);
"""]

kl_module = load_inline(
    name="kl_div_dispatch_ext",
    cpp_sources=cpp_sources,
    cuda_sources=cuda_sources,
    functions=["kl_div_batchmean", "kl_div_shape"],
    with_cuda=True,
    extra_cuda_cflags=["-O3", "-lineinfo", "-Xptxas", "-O3"],
)


class ModelNew(nn.Module):
    def __init__(self) -> None:
        super().__init__()

    def forward(self, predictions: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        return kl_module.kl_div_batchmean(predictions, targets)
