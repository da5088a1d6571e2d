"""Honest fused CUDA kl_div training candidate: one pass computes the loss and writes the gradient.

Forward: grid-stride float4 pass that reads predictions and targets once, accumulates t * log(t / p) and
writes -t / (p * batch) (the gradient for grad_output = 1) with streaming stores; fp64 fixed-order finish.
Backward: scales that gradient by grad_output in place (one read, one write), read on the device. Bytes:
forward 3 matrices, backward 2.

expect: correct
task: kl_div_train
"""
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cuda_source = r"""
#include <torch/extension.h>
#include <c10/cuda/CUDAStream.h>
#include <c10/cuda/CUDAException.h>
#include <cuda_runtime.h>

constexpr int THREADS = 512;

__device__ __forceinline__ float kl_term(float t, float p) {
    return t > 0.f ? t * logf(t / p) : 0.f;
}

__device__ __forceinline__ float block_sum(float v) {
    __shared__ float warp_sums[THREADS / 32];
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffff, v, o);
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    if (lane == 0) warp_sums[warp] = v;
    __syncthreads();
    v = threadIdx.x < THREADS / 32 ? warp_sums[threadIdx.x] : 0.f;
    if (warp == 0)
        for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffff, v, o);
    return v;
}

__global__ void __launch_bounds__(THREADS) kl_fused_vec4(const float4* __restrict__ p, const float4* __restrict__ t,
                                                         int64_t n4, float inv_rows, float4* __restrict__ g,
                                                         float* __restrict__ partial) {
    float acc = 0.f;
    for (int64_t i = (int64_t)blockIdx.x * THREADS + threadIdx.x; i < n4; i += (int64_t)gridDim.x * THREADS) {
        const float4 pv = __ldcs(p + i), tv = __ldcs(t + i);
        acc += kl_term(tv.x, pv.x) + kl_term(tv.y, pv.y) + kl_term(tv.z, pv.z) + kl_term(tv.w, pv.w);
        __stcs(g + i, make_float4(-(tv.x / pv.x) * inv_rows, -(tv.y / pv.y) * inv_rows,
                                  -(tv.z / pv.z) * inv_rows, -(tv.w / pv.w) * inv_rows));
    }
    acc = block_sum(acc);
    if (threadIdx.x == 0) partial[blockIdx.x] = acc;
}

__global__ void __launch_bounds__(THREADS) kl_fused_scalar(const float* __restrict__ p, const float* __restrict__ t,
                                                           int64_t n, float inv_rows, float* __restrict__ g,
                                                           float* __restrict__ partial) {
    float acc = 0.f;
    for (int64_t i = (int64_t)blockIdx.x * THREADS + threadIdx.x; i < n; i += (int64_t)gridDim.x * THREADS) {
        const float pv = p[i], tv = t[i];
        acc += kl_term(tv, pv);
        g[i] = -(tv / pv) * inv_rows;
    }
    acc = block_sum(acc);
    if (threadIdx.x == 0) partial[blockIdx.x] = acc;
}

__global__ void kl_finish(const float* __restrict__ partial, int blocks, double scale, float* __restrict__ out) {
    __shared__ double sums[1024];
    double v = 0.0;
    for (int i = threadIdx.x; i < blocks; i += blockDim.x) v += (double)partial[i];
    sums[threadIdx.x] = v;
    __syncthreads();
    for (int s = blockDim.x / 2; s > 0; s >>= 1) {
        if (threadIdx.x < s) sums[threadIdx.x] += sums[threadIdx.x + s];
        __syncthreads();
    }
    if (threadIdx.x == 0) out[0] = (float)(sums[0] * scale);
}

__global__ void __launch_bounds__(THREADS) scale_vec4(float4* __restrict__ g, int64_t n4, const float* __restrict__ s) {
    const float k = s[0];
    for (int64_t i = (int64_t)blockIdx.x * THREADS + threadIdx.x; i < n4; i += (int64_t)gridDim.x * THREADS) {
        float4 v = __ldcs(g + i);
        v.x *= k; v.y *= k; v.z *= k; v.w *= k;
        __stcs(g + i, v);
    }
}

__global__ void __launch_bounds__(THREADS) scale_scalar(float* __restrict__ g, int64_t n, const float* __restrict__ s) {
    const float k = s[0];
    for (int64_t i = (int64_t)blockIdx.x * THREADS + threadIdx.x; i < n; i += (int64_t)gridDim.x * THREADS) g[i] *= k;
}

static int grid_for(int64_t work, const torch::Tensor& like, int per_sm) {
    int sms = 0;
    cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, like.device().index());
    const int64_t blocks = std::min<int64_t>((int64_t)sms * per_sm, (work + THREADS - 1) / THREADS);
    return (int)std::max<int64_t>(blocks, 1);
}

static bool aligned16(const void* ptr) { return reinterpret_cast<uintptr_t>(ptr) % 16 == 0; }

std::vector<torch::Tensor> kl_fused(torch::Tensor predictions, torch::Tensor targets) {
    TORCH_CHECK(predictions.is_cuda() && targets.is_cuda(), "inputs must be CUDA tensors");
    auto p = predictions.contiguous();
    auto t = targets.contiguous();
    auto g = torch::empty_like(p);
    const int64_t n = p.numel();
    const bool vec = n % 4 == 0 && aligned16(p.data_ptr()) && aligned16(t.data_ptr()) && aligned16(g.data_ptr());
    const int blocks = grid_for(vec ? n / 4 : n, p, 4);
    auto partial = torch::empty({blocks}, p.options());
    auto out = torch::empty({}, p.options());
    const float inv_rows = 1.0f / (float)p.size(0);
    auto stream = c10::cuda::getCurrentCUDAStream();
    if (vec)
        kl_fused_vec4<<<blocks, THREADS, 0, stream>>>(reinterpret_cast<const float4*>(p.data_ptr<float>()),
                                                      reinterpret_cast<const float4*>(t.data_ptr<float>()), n / 4,
                                                      inv_rows, reinterpret_cast<float4*>(g.data_ptr<float>()),
                                                      partial.data_ptr<float>());
    else
        kl_fused_scalar<<<blocks, THREADS, 0, stream>>>(p.data_ptr<float>(), t.data_ptr<float>(), n, inv_rows,
                                                        g.data_ptr<float>(), partial.data_ptr<float>());
    kl_finish<<<1, 1024, 0, stream>>>(partial.data_ptr<float>(), blocks, 1.0 / (double)p.size(0), out.data_ptr<float>());
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return {out, g};
}

void scale_(torch::Tensor g, torch::Tensor grad_output) {
    auto s = grad_output.to(torch::kFloat32).contiguous();
    const int64_t n = g.numel();
    const bool vec = n % 4 == 0 && aligned16(g.data_ptr());
    const int blocks = grid_for(vec ? n / 4 : n, g, 8);
    auto stream = c10::cuda::getCurrentCUDAStream();
    if (vec)
        scale_vec4<<<blocks, THREADS, 0, stream>>>(reinterpret_cast<float4*>(g.data_ptr<float>()), n / 4,
                                                   s.data_ptr<float>());
    else
        scale_scalar<<<blocks, THREADS, 0, stream>>>(g.data_ptr<float>(), n, s.data_ptr<float>());
    C10_CUDA_KERNEL_LAUNCH_CHECK();
}
"""

cpp_source = """
std::vector<torch::Tensor> kl_fused(torch::Tensor predictions, torch::Tensor targets);
void scale_(torch::Tensor g, torch::Tensor grad_output);
"""

ext = load_inline(name="kl_div_train_fused_cuda", cpp_sources=cpp_source, cuda_sources=cuda_source,
                  functions=["kl_fused", "scale_"], extra_cuda_cflags=["-O3"], verbose=False)


class FusedKLDiv(torch.autograd.Function):
    @staticmethod
    def forward(ctx, predictions, targets):
        loss, grad = ext.kl_fused(predictions, targets)
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
        return FusedKLDiv.apply(predictions, targets)
