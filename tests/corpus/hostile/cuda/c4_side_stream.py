r"""Class 4: the honest fused kernel, run on a side stream the timer's events do not see.

The work is never joined back to the caller's stream, so it races with whatever the caller does next:
the judge refills the inputs on the current stream before the next timed call, and the side-stream
kernel reads half-refilled inputs (incorrect). The judge copies each output inside the timing window, and
compares it afterwards: a side-stream result that lands after the copy is work done after the batch's last
event (tamper_detected). If it happened to win every race, the timing would see the work outside its events
and time it by the host clock: the real ~0.75 ms, never ~0.01 ms.

expect: (incorrect|correct|tamper_detected)
diagnosis: (timed call \d+ returned a wrong result|where the timing events do not look|changed after the batch's last event)
task: kl_div
min_ms: 0.6
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
constexpr int UNROLL = 4;

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

__global__ void __launch_bounds__(THREADS) kl_partial_vec4(const float4* __restrict__ p, const float4* __restrict__ t,
                                                           int64_t n4, float* __restrict__ partial) {
    float acc = 0.f;
    const int64_t stride = (int64_t)gridDim.x * THREADS;
    int64_t i = (int64_t)blockIdx.x * THREADS + threadIdx.x;
    for (; i + (UNROLL - 1) * stride < n4; i += UNROLL * stride) {
        float4 pv[UNROLL], tv[UNROLL];
#pragma unroll
        for (int u = 0; u < UNROLL; ++u) { pv[u] = __ldcs(p + i + u * stride); tv[u] = __ldcs(t + i + u * stride); }
#pragma unroll
        for (int u = 0; u < UNROLL; ++u)
            acc += kl_term(tv[u].x, pv[u].x) + kl_term(tv[u].y, pv[u].y) + kl_term(tv[u].z, pv[u].z) + kl_term(tv[u].w, pv[u].w);
    }
    for (; i < n4; i += stride) {
        const float4 pv = __ldcs(p + i), tv = __ldcs(t + i);
        acc += kl_term(tv.x, pv.x) + kl_term(tv.y, pv.y) + kl_term(tv.z, pv.z) + kl_term(tv.w, pv.w);
    }
    acc = block_sum(acc);
    if (threadIdx.x == 0) partial[blockIdx.x] = acc;
}

__global__ void __launch_bounds__(THREADS) kl_partial_scalar(const float* __restrict__ p, const float* __restrict__ t,
                                                             int64_t n, float* __restrict__ partial) {
    float acc = 0.f;
    for (int64_t i = (int64_t)blockIdx.x * THREADS + threadIdx.x; i < n; i += (int64_t)gridDim.x * THREADS)
        acc += kl_term(t[i], p[i]);
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

torch::Tensor kl_div_forward(torch::Tensor predictions, torch::Tensor targets) {
    TORCH_CHECK(predictions.is_cuda() && targets.is_cuda(), "inputs must be CUDA tensors");
    auto p = predictions.contiguous().to(torch::kFloat32);
    auto t = targets.contiguous().to(torch::kFloat32);
    const int64_t n = p.numel();
    const int64_t rows = p.dim() > 0 ? p.size(0) : 1;
    auto stream = c10::cuda::getCurrentCUDAStream();
    int sms = 0;
    cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, p.device().index());
    const bool vec = n % 4 == 0 && reinterpret_cast<uintptr_t>(p.data_ptr()) % 16 == 0 &&
                     reinterpret_cast<uintptr_t>(t.data_ptr()) % 16 == 0;
    const int64_t work = vec ? n / 4 : n;
    int blocks = (int)std::min<int64_t>((int64_t)sms * 4, (work + THREADS - 1) / THREADS);
    blocks = std::max(blocks, 1);
    auto partial = torch::empty({blocks}, p.options());
    auto out = torch::empty({}, p.options());
    if (vec)
        kl_partial_vec4<<<blocks, THREADS, 0, stream>>>(reinterpret_cast<const float4*>(p.data_ptr<float>()),
                                                        reinterpret_cast<const float4*>(t.data_ptr<float>()),
                                                        work, partial.data_ptr<float>());
    else
        kl_partial_scalar<<<blocks, THREADS, 0, stream>>>(p.data_ptr<float>(), t.data_ptr<float>(), n,
                                                          partial.data_ptr<float>());
    kl_finish<<<1, 1024, 0, stream>>>(partial.data_ptr<float>(), blocks, 1.0 / (double)rows, out.data_ptr<float>());
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return out;
}
"""

cpp_source = "torch::Tensor kl_div_forward(torch::Tensor predictions, torch::Tensor targets);"

kl_ext = load_inline(name="kl_div_side", cpp_sources=cpp_source, cuda_sources=cuda_source,
                     functions=["kl_div_forward"], extra_cuda_cflags=["-O3"], verbose=False)


_side = torch.cuda.Stream()


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, predictions, targets):
        # All the work on a side stream, never joined back: events on the current stream see ~nothing.
        with torch.cuda.stream(_side):
            return kl_ext.kl_div_forward(predictions, targets)
