"""Honest fast CUDA kl_div, built the fast way: the same kernel as kl_div_fast.py, with the torch glue moved
out of the `.cu`.

A `.cu` that includes torch's headers (`#include <torch/extension.h>`, or the `#include <torch/types.h>` that
`load_inline` puts at the top of every `.cu` unless told not to) sends ~240k-290k lines of C++ through nvcc's
host front end, device front end and host compiler: 35-65 s of a fresh build (docs/results/nvcc-phases-*.md).
Here the `.cu` holds only the kernel and plain-C++ launch helpers (raw pointers, a `cudaStream_t`), built
with `no_implicit_headers=True`; the `torch::Tensor` wrapper lives in `cpp_sources`, which g++ compiles beside
the bindings (the judge serves its `torch/extension.h` from a precompiled header). Same kernel, same launch,
same result as kl_div_fast.py; only the build is faster.

expect: correct
task: kl_div
"""
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cuda_source = r"""
#include <cuda_runtime.h>
#include <algorithm>
#include <cstdint>

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

// Blocks that fit the device at once (cached per device); 0 with the error in *err when a query fails.
int resident_blocks(int device, cudaError_t* err) {
    static int cached[64] = {0};
    if (device < 0 || device >= 64) device = 0;
    *err = cudaSuccess;
    if (cached[device] == 0) {
        int sms = 0, per_sm = 0;
        if ((*err = cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device)) != cudaSuccess) return 0;
        if ((*err = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kl_fast_kernel, THREADS, 0)) != cudaSuccess)
            return 0;
        cached[device] = std::max(1, std::min(MAX_BLOCKS, sms * std::max(per_sm, 1)));
    }
    return cached[device];
}

}  // namespace

// The launch plan for n elements at these addresses: 16-byte path or scalar path, and the grid.
struct KlPlan { int64_t pre; int64_t n4; bool vec; int blocks; };

cudaError_t kl_fast_plan(const float* p, const float* t, int64_t n, int device, KlPlan* plan) {
    const uintptr_t pa = reinterpret_cast<uintptr_t>(p);
    const uintptr_t ta = reinterpret_cast<uintptr_t>(t);
    plan->vec = (pa % 16) == (ta % 16) && (pa % 4) == 0;
    plan->pre = 0;
    plan->n4 = 0;
    if (plan->vec) {
        plan->pre = std::min<int64_t>(n, (int64_t)(((16 - (pa % 16)) % 16) / 4));
        plan->n4 = (n - plan->pre) / 4;
    }
    cudaError_t err;
    const int resident = resident_blocks(device, &err);
    if (err != cudaSuccess) return err;
    const int64_t per_block = (int64_t)THREADS * (plan->vec ? 4 * UNROLL : 4);
    plan->blocks = std::max(1, (int)std::min<int64_t>(resident, (n + per_block - 1) / per_block));
    return cudaSuccess;
}

cudaError_t kl_fast_launch(const float* p, const float* t, int64_t n, const KlPlan* plan, double inv_batch,
                           double* partial, float* out, cudaStream_t stream) {
    kl_fast_kernel<<<plan->blocks, THREADS, 0, stream>>>(p, t, n, plan->pre, plan->n4, plan->vec, inv_batch,
                                                         partial, out);
    return cudaGetLastError();
}
"""

cpp_source = r"""
#include <torch/extension.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <cstdint>
#include <limits>

struct KlPlan { int64_t pre; int64_t n4; bool vec; int blocks; };
cudaError_t kl_fast_plan(const float* p, const float* t, int64_t n, int device, KlPlan* plan);
cudaError_t kl_fast_launch(const float* p, const float* t, int64_t n, const KlPlan* plan, double inv_batch,
                           double* partial, float* out, cudaStream_t stream);

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

    KlPlan plan;
    C10_CUDA_CHECK(kl_fast_plan(p.data_ptr<float>(), t.data_ptr<float>(), n, p.get_device(), &plan));
    auto partial = torch::empty({plan.blocks}, p.options().dtype(torch::kFloat64));
    C10_CUDA_CHECK(kl_fast_launch(p.data_ptr<float>(), t.data_ptr<float>(), n, &plan, 1.0 / (double)batch,
                                  partial.data_ptr<double>(), out.data_ptr<float>(),
                                  c10::cuda::getCurrentCUDAStream()));
    return out;
}
"""

kl_ext = load_inline(name="kl_div_fast_split_v1", cpp_sources=cpp_source, cuda_sources=cuda_source,
                     functions=["kl_div_forward"], extra_cuda_cflags=["-O3"], no_implicit_headers=True,
                     verbose=False)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, predictions, targets):
        if predictions.dtype != torch.float32:
            predictions = predictions.float()
        if targets.dtype != torch.float32:
            targets = targets.float()
        return kl_ext.kl_div_forward(predictions.contiguous(), targets.contiguous())
