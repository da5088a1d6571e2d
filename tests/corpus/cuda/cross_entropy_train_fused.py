"""Honest fused CUDA cross_entropy training candidate: each row's loss and gradient in one kernel.

One 256-thread block per row: an online (max, sum of exp) over the row, then the row read again (from L2)
to write (softmax - onehot) / batch with streaming stores, and the row loss; fp64 fixed-order mean.
Backward scales the saved gradient by grad_output in place (read on the device). Accurate expf.

expect: correct
task: cross_entropy_train
"""
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cuda_source = r"""
#include <torch/extension.h>
#include <c10/cuda/CUDAStream.h>
#include <c10/cuda/CUDAException.h>
#include <cuda_runtime.h>
#include <cfloat>

constexpr int THREADS = 256;

__device__ __forceinline__ void merge(float& m, float& s, float m2, float s2) {
    const float mx = fmaxf(m, m2);
    s = (m == -FLT_MAX ? 0.f : s * expf(m - mx)) + (m2 == -FLT_MAX ? 0.f : s2 * expf(m2 - mx));
    m = mx;
}

// (max, sum of exp(x - max)) of one row, the whole block cooperating; every thread gets the result.
__device__ __forceinline__ void row_max_sum(const float* __restrict__ row, int64_t cols, float& m_out, float& s_out) {
    float m = -FLT_MAX, s = 0.f;
    for (int64_t c = threadIdx.x; c < cols; c += THREADS) {
        const float x = row[c];
        if (x > m) { s = s * expf(m - x) + 1.f; m = x; } else { s += expf(x - m); }
    }
    for (int o = 16; o > 0; o >>= 1) merge(m, s, __shfl_xor_sync(0xffffffff, m, o), __shfl_xor_sync(0xffffffff, s, o));
    __shared__ float wm[THREADS / 32], ws[THREADS / 32];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    if (lane == 0) { wm[warp] = m; ws[warp] = s; }
    __syncthreads();
    m = -FLT_MAX; s = 0.f;
    for (int w = 0; w < THREADS / 32; ++w) merge(m, s, wm[w], ws[w]);
    __syncthreads();
    m_out = m; s_out = s;
}

__global__ void __launch_bounds__(THREADS) ce_fused_rows(const float* __restrict__ x, const int64_t* __restrict__ y,
                                                         int64_t rows, int64_t cols, float* __restrict__ g,
                                                         float* __restrict__ loss) {
    const int64_t r = blockIdx.x;
    const float* row = x + r * cols;
    float m, s;
    row_max_sum(row, cols, m, s);  // the row's second read below mostly hits L2 (16 KiB a row at 4096 classes)
    const float l = m + logf(s);
    const float inv_rows = 1.0f / (float)rows;
    const int64_t target = y[r];
    float* out = g + r * cols;
    for (int64_t c = threadIdx.x; c < cols; c += THREADS)
        __stcs(out + c, (expf(row[c] - l) - (c == target ? 1.f : 0.f)) * inv_rows);
    if (threadIdx.x == 0) loss[r] = l - row[target];
}

__global__ void mean_fp64(const float* __restrict__ values, int64_t n, float* __restrict__ out) {
    __shared__ double sums[1024];
    double v = 0.0;
    for (int64_t i = threadIdx.x; i < n; i += blockDim.x) v += (double)values[i];
    sums[threadIdx.x] = v;
    __syncthreads();
    for (int s = blockDim.x / 2; s > 0; s >>= 1) {
        if (threadIdx.x < s) sums[threadIdx.x] += sums[threadIdx.x + s];
        __syncthreads();
    }
    if (threadIdx.x == 0) out[0] = (float)(sums[0] / (double)n);
}

__global__ void __launch_bounds__(THREADS) scale_rows(float* __restrict__ g, int64_t n, const float* __restrict__ s) {
    const float k = s[0];
    for (int64_t i = (int64_t)blockIdx.x * THREADS + threadIdx.x; i < n; i += (int64_t)gridDim.x * THREADS) g[i] *= k;
}

std::vector<torch::Tensor> ce_fused(torch::Tensor logits, torch::Tensor targets) {
    TORCH_CHECK(logits.is_cuda() && targets.is_cuda(), "inputs must be CUDA tensors");
    auto x = logits.contiguous();
    auto y = targets.contiguous();
    const int64_t rows = x.size(0), cols = x.size(1);
    auto g = torch::empty_like(x);
    auto row_loss = torch::empty({rows}, x.options());
    auto out = torch::empty({}, x.options());
    auto stream = c10::cuda::getCurrentCUDAStream();
    ce_fused_rows<<<rows, THREADS, 0, stream>>>(x.data_ptr<float>(), y.data_ptr<int64_t>(), rows, cols,
                                                g.data_ptr<float>(), row_loss.data_ptr<float>());
    mean_fp64<<<1, 1024, 0, stream>>>(row_loss.data_ptr<float>(), rows, out.data_ptr<float>());
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return {out, g};
}

void scale_(torch::Tensor g, torch::Tensor grad_output) {
    auto s = grad_output.to(torch::kFloat32).contiguous();
    int sms = 0;
    cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, g.device().index());
    const int64_t n = g.numel();
    const int blocks = (int)std::max<int64_t>(1, std::min<int64_t>((int64_t)sms * 8, (n + THREADS - 1) / THREADS));
    scale_rows<<<blocks, THREADS, 0, c10::cuda::getCurrentCUDAStream()>>>(g.data_ptr<float>(), n, s.data_ptr<float>());
    C10_CUDA_KERNEL_LAUNCH_CHECK();
}
"""

cpp_source = """
std::vector<torch::Tensor> ce_fused(torch::Tensor logits, torch::Tensor targets);
void scale_(torch::Tensor g, torch::Tensor grad_output);
"""

ext = load_inline(name="cross_entropy_train_fused_cuda", cpp_sources=cpp_source, cuda_sources=cuda_source,
                  functions=["ce_fused", "scale_"], extra_cuda_cflags=["-O3"], verbose=False)


class FusedCrossEntropy(torch.autograd.Function):
    @staticmethod
    def forward(ctx, logits, targets):
        loss, grad = ext.ce_fused(logits, targets)
        ctx.grad = grad  # not save_for_backward: backward scales it in place and hands it on
        return loss

    @staticmethod
    def backward(ctx, grad_output):
        grad = ctx.grad
        del ctx.grad
        ext.scale_(grad, grad_output)
        return grad, None


class ModelNew(nn.Module):
    def forward(self, predictions, targets):
        return FusedCrossEntropy.apply(predictions, targets)
