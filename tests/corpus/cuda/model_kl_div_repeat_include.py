"""Model-style honest kl_div, written the way LLM samples in public KernelBench runs write it.

What makes it typical: `cpp_sources` includes torch/extension.h again (load_inline already prepends it),
CHECK_* macros, a device helper, one block per row with a shared-memory tree reduction, a float atomicAdd of
the row sums, the launch on the legacy default stream, `extra_cflags=["-O3"]`, `functions=[...]` bindings.
The judge's precompiled header must not turn the repeated include into a compile error (issue 24).

expect: correct
task: kl_div
"""
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

kl_div_cuda_source = """
#include <torch/extension.h>
#include <cuda.h>
#include <cuda_runtime.h>

#define CHECK_CUDA(x) TORCH_CHECK(x.device().is_cuda(), #x " must be a CUDA tensor")
#define CHECK_CONTIGUOUS(x) TORCH_CHECK(x.is_contiguous(), #x " must be contiguous")
#define CHECK_INPUT(x) CHECK_CUDA(x); CHECK_CONTIGUOUS(x)

__device__ __forceinline__ float kl_elem(float t, float p) {
    // xlogy semantics: a zero target contributes nothing, whatever p is
    return t > 0.0f ? t * (logf(t) - logf(p)) : 0.0f;
}

__global__ void kl_div_row_kernel(const float* __restrict__ predictions, const float* __restrict__ targets,
                                  float* __restrict__ out, int dim, float scale) {
    extern __shared__ float sdata[];
    const int row = blockIdx.x;
    const float* p = predictions + (size_t)row * dim;
    const float* t = targets + (size_t)row * dim;
    float sum = 0.0f;
    for (int i = threadIdx.x; i < dim; i += blockDim.x) {
        sum += kl_elem(t[i], p[i]);
    }
    sdata[threadIdx.x] = sum;
    __syncthreads();
    for (int s = blockDim.x / 2; s > 0; s >>= 1) {
        if (threadIdx.x < s) sdata[threadIdx.x] += sdata[threadIdx.x + s];
        __syncthreads();
    }
    if (threadIdx.x == 0) atomicAdd(out, sdata[0] * scale);
}

torch::Tensor kl_div_cuda(torch::Tensor predictions, torch::Tensor targets) {
    CHECK_INPUT(predictions);
    CHECK_INPUT(targets);
    const int batch = predictions.size(0);
    const int dim = predictions.numel() / batch;
    auto out = torch::zeros({}, predictions.options());
    const int threads = 256;
    kl_div_row_kernel<<<batch, threads, threads * sizeof(float)>>>(
        predictions.data_ptr<float>(), targets.data_ptr<float>(), out.data_ptr<float>(), dim, 1.0f / batch);
    return out;
}
"""

kl_div_cpp_source = """
#include <torch/extension.h>

torch::Tensor kl_div_cuda(torch::Tensor predictions, torch::Tensor targets);
"""

kl_div = load_inline(
    name="kl_div",
    cpp_sources=kl_div_cpp_source,
    cuda_sources=kl_div_cuda_source,
    functions=["kl_div_cuda"],
    verbose=True,
    extra_cflags=["-O3"],
    extra_ldflags=[""],
)


class ModelNew(nn.Module):
    def __init__(self):
        super(ModelNew, self).__init__()
        self.kl_div = kl_div

    def forward(self, predictions, targets):
        return self.kl_div.kl_div_cuda(predictions.contiguous(), targets.contiguous())
