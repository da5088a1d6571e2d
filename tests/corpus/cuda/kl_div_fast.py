"""Honest fast CUDA kl_div: one streaming pass at ~speed-of-light, 16-byte loads, deterministic fp64 sum.

F.kl_div(log(p), t, reduction='batchmean') = sum(t * (log t - log p)) / batch. 'batchmean' needs no
per-row structure, so the kernel streams the two flattened inputs once:

* a persistent grid (SMs x resident 1024-thread blocks) strides over the arrays with four float4 loads
  per input in flight per thread (`ld.global.cs`: read-once data, evict first); a scalar prefix/tail
  handles sizes that are not a multiple of 4 and pointers that are not 16-byte aligned (a plain scalar
  loop when the two pointers are misaligned differently);
* one log per element: t * logf(t / p) with an approximate divide (2 ulp) and the accurate logf; an
  element whose t or p is tiny, zero, subnormal, Inf or NaN takes the exact t * (logf t - logf p) path
  (t == 0 contributes 0, like xlogy; p == 0 gives inf and NaN propagates, like the reference);
* each thread adds 16 terms pairwise in fp32, then accumulates in fp64; blocks reduce in fp64 and write a
  partial; the last block to finish (threadfence + atomicInc ticket, which wraps back to 0 by itself)
  adds the partials in a fixed order and divides by the batch. Bitwise deterministic for a given GPU.

expect: correct
task: kl_div
"""
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cuda_source = r"""
#include <torch/extension.h>
#include <c10/cuda/CUDAStream.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>
#include <cuda_runtime.h>
#include <cstdint>
#include <limits>

namespace {

constexpr int THREADS = 1024;   // 1024 > 512 > 256 on the H100 (0.724 / 0.732 / 0.739 ms)
constexpr int UNROLL = 4;
constexpr int MAX_BLOCKS = 4096;

__device__ unsigned int g_ticket = 0;   // wraps to 0 when the last block takes its ticket

// 16-byte streaming load: read-once data, evict-first in L2 (ld.global.cs.v4.f32).
__device__ __forceinline__ float4 ld_stream(const float4* ptr) { return __ldcs(ptr); }

// One element. Fast path: both operands comfortably normal, so t/p cannot overflow or underflow.
__device__ __forceinline__ float kl_term(float t, float p) {
    if (fminf(t, p) >= 1e-30f && fmaxf(t, p) <= 1e30f) return t * logf(__fdividef(t, p));
    return t == 0.f ? 0.f : t * (logf(t) - logf(p));
}

__device__ __forceinline__ float kl4(const float4 t, const float4 p) {
    return (kl_term(t.x, p.x) + kl_term(t.y, p.y)) + (kl_term(t.z, p.z) + kl_term(t.w, p.w));
}

__device__ __forceinline__ double warp_sum(double v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

// Sum of v over the block, valid in thread 0. Fixed order: deterministic.
__device__ __forceinline__ double block_sum(double v) {
    __shared__ double warp_part[THREADS / 32];
    v = warp_sum(v);
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    if (lane == 0) warp_part[warp] = v;
    __syncthreads();
    v = (threadIdx.x < THREADS / 32) ? warp_part[threadIdx.x] : 0.0;
    if (warp == 0) v = warp_sum(v);
    __syncthreads();   // warp_part may be reused by a later call
    return v;
}

// vec: p + pre and t + pre are 16-byte aligned; elements [0, pre) and [pre + 4*n4, n) are scalars.
__global__ void __launch_bounds__(THREADS)
kl_fast_kernel(const float* __restrict__ p, const float* __restrict__ t, int64_t n, int64_t pre, int64_t n4,
               bool vec, double inv_batch, double* __restrict__ partial, float* __restrict__ out) {
    const int64_t gtid = (int64_t)blockIdx.x * THREADS + threadIdx.x;
    const int64_t stride = (int64_t)gridDim.x * THREADS;
    double acc = 0.0;
    if (vec) {
        const float4* __restrict__ P = reinterpret_cast<const float4*>(p + pre);
        const float4* __restrict__ T = reinterpret_cast<const float4*>(t + pre);
        int64_t i = gtid;
        for (; i + (UNROLL - 1) * stride < n4; i += UNROLL * stride) {
            float4 pv[UNROLL], tv[UNROLL];
#pragma unroll
            for (int u = 0; u < UNROLL; ++u) {
                pv[u] = ld_stream(P + i + u * stride);
                tv[u] = ld_stream(T + i + u * stride);
            }
            float s[UNROLL];
#pragma unroll
            for (int u = 0; u < UNROLL; ++u) s[u] = kl4(tv[u], pv[u]);
#pragma unroll
            for (int w = UNROLL / 2; w > 0; w >>= 1)   // pairwise: 4 * UNROLL terms, log depth
#pragma unroll
                for (int u = 0; u < w; ++u) s[u] += s[u + w];
            acc += (double)s[0];
        }
        for (; i < n4; i += stride) acc += (double)kl4(ld_stream(T + i), ld_stream(P + i));
        // scalar head (misaligned start) and tail (n not a multiple of 4): at most 3 + 3 elements
        const int64_t tail0 = pre + 4 * n4;
        if (gtid < pre) acc += (double)kl_term(t[gtid], p[gtid]);
        if (gtid < n - tail0) acc += (double)kl_term(t[tail0 + gtid], p[tail0 + gtid]);
    } else {
        for (int64_t i = gtid; i < n; i += stride) acc += (double)kl_term(t[i], p[i]);
    }

    const double block_total = block_sum(acc);
    __shared__ bool is_last;
    if (threadIdx.x == 0) {
        partial[blockIdx.x] = block_total;
        __threadfence();
        const unsigned int ticket = atomicInc(&g_ticket, gridDim.x - 1);
        is_last = (ticket == gridDim.x - 1);
    }
    __syncthreads();
    if (!is_last) return;
    __threadfence();
    double v = 0.0;
    for (int b = threadIdx.x; b < (int)gridDim.x; b += THREADS) v += __ldcg(partial + b);
    v = block_sum(v);
    if (threadIdx.x == 0) out[0] = (float)(v * inv_batch);
}

int resident_blocks(int device) {
    static int cached[64] = {0};
    if (device < 0 || device >= 64) device = 0;
    if (cached[device] == 0) {
        int sms = 0, per_sm = 0;
        C10_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
        C10_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kl_fast_kernel, THREADS, 0));
        cached[device] = std::max(1, std::min(MAX_BLOCKS, sms * std::max(per_sm, 1)));
    }
    return cached[device];
}

}  // namespace

torch::Tensor kl_div_forward(torch::Tensor predictions, torch::Tensor targets) {
    TORCH_CHECK(predictions.is_cuda() && targets.is_cuda(), "inputs must be CUDA tensors");
    TORCH_CHECK(predictions.sizes() == targets.sizes(), "predictions and targets must have the same shape");
    TORCH_CHECK(predictions.scalar_type() == torch::kFloat32 && targets.scalar_type() == torch::kFloat32,
                "expected float32 inputs");
    c10::cuda::CUDAGuard guard(predictions.device());
    auto p = predictions.contiguous();
    auto t = targets.contiguous();
    const int64_t n = p.numel();
    const int64_t batch = p.dim() > 0 ? p.size(0) : 1;
    auto out = torch::empty({}, p.options());
    if (n == 0) return out.fill_(std::numeric_limits<float>::quiet_NaN());

    const uintptr_t pa = reinterpret_cast<uintptr_t>(p.data_ptr<float>());
    const uintptr_t ta = reinterpret_cast<uintptr_t>(t.data_ptr<float>());
    const bool vec = (pa % 16) == (ta % 16) && (pa % 4) == 0;
    int64_t pre = 0, n4 = 0;
    if (vec) {
        pre = std::min<int64_t>(n, (int64_t)(((16 - (pa % 16)) % 16) / 4));
        n4 = (n - pre) / 4;
    }
    const int64_t per_block = (int64_t)THREADS * (vec ? 4 * UNROLL : 4);
    int blocks = (int)std::min<int64_t>(resident_blocks(p.get_device()), (n + per_block - 1) / per_block);
    blocks = std::max(blocks, 1);
    auto partial = torch::empty({blocks}, p.options().dtype(torch::kFloat64));
    auto stream = c10::cuda::getCurrentCUDAStream();
    kl_fast_kernel<<<blocks, THREADS, 0, stream>>>(p.data_ptr<float>(), t.data_ptr<float>(), n, pre, n4, vec,
                                                   1.0 / (double)batch, partial.data_ptr<double>(),
                                                   out.data_ptr<float>());
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return out;
}
"""

cpp_source = "torch::Tensor kl_div_forward(torch::Tensor predictions, torch::Tensor targets);"

kl_ext = load_inline(name="kl_div_fast_v1", cpp_sources=cpp_source, cuda_sources=cuda_source,
                     functions=["kl_div_forward"], extra_cuda_cflags=["-O3"], verbose=False)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, predictions, targets):
        if predictions.dtype != torch.float32:
            predictions = predictions.float()
        if targets.dtype != torch.float32:
            targets = targets.float()
        return kl_ext.kl_div_forward(predictions.contiguous(), targets.contiguous())
