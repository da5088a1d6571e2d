"""Honest fast CUDA cross_entropy, built the fast way: the same kernel as cross_entropy_fast.py, with the torch
glue moved out of the `.cu`.

The `.cu` holds only the kernel and plain-C++ launch helpers (raw pointers, a `cudaStream_t`) and is built with
`no_implicit_headers=True`, so nvcc never sees torch's headers (40-65 s of a fresh build when it does,
sandbox/build/advice.py); the `torch::Tensor` wrapper lives in `cpp_sources`, compiled by g++ beside the
bindings. Same kernel, launch and result as cross_entropy_fast.py; only the build is faster.

expect: correct
task: cross_entropy
"""
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cuda_source = r"""
#include <cuda_runtime.h>
#include <algorithm>
#include <cstdint>

namespace {

constexpr int THREADS = 128;
constexpr int WARPS = THREADS / 32;
constexpr int CHUNK = 16;             // float4 per lane per step: 8 KiB in flight per warp
constexpr int MAX_BLOCKS = 8192;
constexpr float LOG2E = 1.4426950408889634f;

__device__ unsigned int g_ticket = 0;

// 16-byte streaming load: read-once data, evict-first in L2 (ld.global.cs.v4.f32).
__device__ __forceinline__ float4 ld_stream(const float4* ptr) { return __ldcs(ptr); }

__device__ __forceinline__ float ex2(float x) {
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
    return y;
}

// Running (max, sum of exp(x - max)) of one lane.
struct LSE { float m; float s; };

__device__ __forceinline__ void add_values(LSE& a, const float* v, int k, float cmax) {
    const float mn = fmaxf(a.m, cmax);
    if (mn == -INFINITY) return;                 // nothing but -inf so far
    const float scale = ex2((a.m - mn) * LOG2E);  // 1 when the max did not move, 0 from -inf
    float s0 = 0.f, s1 = 0.f;
#pragma unroll
    for (int j = 0; j < k; j += 2) {
        s0 += ex2((v[j] - mn) * LOG2E);
        if (j + 1 < k) s1 += ex2((v[j + 1] - mn) * LOG2E);
    }
    a.s = a.s * scale + (s0 + s1);
    a.m = mn;
}

__device__ __forceinline__ void add_one(LSE& a, float x) { add_values(a, &x, 1, x); }

__device__ __forceinline__ LSE merge(LSE a, LSE b) {
    const float mn = fmaxf(a.m, b.m);
    if (mn == -INFINITY) return a;
    return {mn, a.s * ex2((a.m - mn) * LOG2E) + b.s * ex2((b.m - mn) * LOG2E)};
}

__global__ void __launch_bounds__(THREADS, 4)
ce_fast_kernel(const float* __restrict__ x, const int64_t* __restrict__ target, int64_t rows, int64_t cols,
               int64_t ignore_index, double* __restrict__ part_sum, double* __restrict__ part_cnt,
               float* __restrict__ out) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int64_t nwarps = (int64_t)gridDim.x * WARPS;
    double wsum = 0.0, wcnt = 0.0;   // meaningful in lane 0

    for (int64_t row = (int64_t)blockIdx.x * WARPS + warp; row < rows; row += nwarps) {
        const float* __restrict__ xr = x + row * cols;
        const int64_t tg = target[row];
        const bool in_range = tg >= 0 && tg < cols;
        float xt = 0.f;
        if (lane == 0 && in_range) xt = __ldg(xr + tg);    // issued before the stream

        LSE a{-INFINITY, 0.f};
        int64_t pre = (int64_t)(((16u - (reinterpret_cast<uintptr_t>(xr) & 15u)) & 15u) >> 2);
        if (pre > cols) pre = cols;
        if (lane < pre) add_one(a, __ldcs(xr + lane));
        const float4* __restrict__ V = reinterpret_cast<const float4*>(xr + pre);
        const int64_t n4 = (cols - pre) >> 2;
        int64_t k = lane;
        for (; k + (CHUNK - 1) * 32 < n4; k += CHUNK * 32) {
            float v[4 * CHUNK];
#pragma unroll
            for (int c = 0; c < CHUNK; ++c) {
                const float4 q = ld_stream(V + k + c * 32);
                v[4 * c] = q.x; v[4 * c + 1] = q.y; v[4 * c + 2] = q.z; v[4 * c + 3] = q.w;
            }
            float m0 = v[0], m1 = v[1];
#pragma unroll
            for (int j = 2; j < 4 * CHUNK; j += 2) { m0 = fmaxf(m0, v[j]); m1 = fmaxf(m1, v[j + 1]); }
            add_values(a, v, 4 * CHUNK, fmaxf(m0, m1));
        }
        for (; k < n4; k += 32) {
            const float4 q = ld_stream(V + k);
            const float v[4] = {q.x, q.y, q.z, q.w};
            add_values(a, v, 4, fmaxf(fmaxf(q.x, q.y), fmaxf(q.z, q.w)));
        }
        const int64_t tail0 = pre + 4 * n4;
        if (lane < cols - tail0) add_one(a, __ldcs(xr + tail0 + lane));

#pragma unroll
        for (int o = 16; o > 0; o >>= 1) {
            LSE b{__shfl_xor_sync(0xffffffffu, a.m, o), __shfl_xor_sync(0xffffffffu, a.s, o)};
            a = merge(a, b);
        }
        if (lane == 0 && tg != ignore_index) {
            const float loss = in_range ? (a.m + logf(a.s)) - xt : __int_as_float(0x7fffffff);
            wsum += (double)loss;
            wcnt += 1.0;
        }
    }

    __shared__ double s_sum[WARPS], s_cnt[WARPS];
    __shared__ bool is_last;
    if (lane == 0) { s_sum[warp] = wsum; s_cnt[warp] = wcnt; }
    __syncthreads();
    if (threadIdx.x == 0) {
        double bs = 0.0, bc = 0.0;
        for (int w = 0; w < WARPS; ++w) { bs += s_sum[w]; bc += s_cnt[w]; }
        part_sum[blockIdx.x] = bs;
        part_cnt[blockIdx.x] = bc;
        __threadfence();
        const unsigned int ticket = atomicInc(&g_ticket, gridDim.x - 1);
        is_last = (ticket == gridDim.x - 1);
    }
    __syncthreads();
    if (!is_last) return;
    __threadfence();
    double ts = 0.0, tc = 0.0;
    for (int b = threadIdx.x; b < (int)gridDim.x; b += THREADS) { ts += __ldcg(part_sum + b); tc += __ldcg(part_cnt + b); }
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
        ts += __shfl_xor_sync(0xffffffffu, ts, o);
        tc += __shfl_xor_sync(0xffffffffu, tc, o);
    }
    __syncthreads();
    if (lane == 0) { s_sum[warp] = ts; s_cnt[warp] = tc; }
    __syncthreads();
    if (threadIdx.x == 0) {
        double fs = 0.0, fc = 0.0;
        for (int w = 0; w < WARPS; ++w) { fs += s_sum[w]; fc += s_cnt[w]; }
        out[0] = (float)(fs / fc);   // 0/0 = NaN when every row is ignored, like PyTorch
    }
}

// Blocks that fit the device at once (cached per device); 0 with the error in *err when a query fails.
int resident_blocks(int device, cudaError_t* err) {
    static int cached[64] = {0};
    if (device < 0 || device >= 64) device = 0;
    *err = cudaSuccess;
    if (cached[device] == 0) {
        int sms = 0, per_sm = 0;
        if ((*err = cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device)) != cudaSuccess) return 0;
        if ((*err = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, ce_fast_kernel, THREADS, 0)) != cudaSuccess)
            return 0;
        cached[device] = std::max(1, std::min(MAX_BLOCKS, sms * std::max(per_sm, 1)));
    }
    return cached[device];
}

}  // namespace

// The grid for `rows` rows on `device`.
cudaError_t ce_fast_blocks(int64_t rows, int device, int* blocks) {
    cudaError_t err;
    const int resident = resident_blocks(device, &err);
    if (err != cudaSuccess) return err;
    *blocks = std::max(1, (int)std::min<int64_t>(resident, (rows + WARPS - 1) / WARPS));
    return cudaSuccess;
}

cudaError_t ce_fast_launch(const float* x, const int64_t* t, int64_t rows, int64_t cols, int64_t ignore_index,
                           int blocks, double* parts, float* out, cudaStream_t stream) {
    ce_fast_kernel<<<blocks, THREADS, 0, stream>>>(x, t, rows, cols, ignore_index, parts, parts + blocks, out);
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

cudaError_t ce_fast_blocks(int64_t rows, int device, int* blocks);
cudaError_t ce_fast_launch(const float* x, const int64_t* t, int64_t rows, int64_t cols, int64_t ignore_index,
                           int blocks, double* parts, float* out, cudaStream_t stream);

torch::Tensor cross_entropy_forward(torch::Tensor logits, torch::Tensor targets, int64_t ignore_index) {
    TORCH_CHECK(logits.is_cuda() && targets.is_cuda(), "inputs must be CUDA tensors");
    TORCH_CHECK(logits.dim() == 2 && targets.dim() == 1 && targets.size(0) == logits.size(0),
                "expected logits (N, C) and targets (N,)");
    TORCH_CHECK(logits.scalar_type() == torch::kFloat32 && targets.scalar_type() == torch::kInt64,
                "expected float32 logits and int64 targets");
    c10::cuda::CUDAGuard guard(logits.device());
    auto x = logits.contiguous();
    auto t = targets.contiguous();
    const int64_t rows = x.size(0), cols = x.size(1);
    auto out = torch::empty({}, x.options());
    if (rows == 0) return out.fill_(std::numeric_limits<float>::quiet_NaN());
    int blocks = 1;
    C10_CUDA_CHECK(ce_fast_blocks(rows, x.get_device(), &blocks));
    auto parts = torch::empty({2, blocks}, x.options().dtype(torch::kFloat64));
    C10_CUDA_CHECK(ce_fast_launch(x.data_ptr<float>(), t.data_ptr<int64_t>(), rows, cols, ignore_index, blocks,
                                  parts.data_ptr<double>(), out.data_ptr<float>(),
                                  c10::cuda::getCurrentCUDAStream()));
    return out;
}
"""

ce_ext = load_inline(name="cross_entropy_fast_split_v1", cpp_sources=cpp_source, cuda_sources=cuda_source,
                     functions=["cross_entropy_forward"], extra_cuda_cflags=["-O3"], no_implicit_headers=True,
                     verbose=False)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, predictions, targets):
        if predictions.dim() == 1:   # a single sample: (C,) logits and a 0-dim target
            predictions, targets = predictions.unsqueeze(0), targets.reshape(1)
        if predictions.dtype != torch.float32:
            predictions = predictions.float()
        if targets.dtype != torch.int64:
            targets = targets.long()
        return ce_ext.cross_entropy_forward(predictions.contiguous(), targets.contiguous(), -100)
