r"""Class 12 (issue 25): deferred work, launched by an allocator trace callback when the harness next allocates.

A C++ extension attaches a trace tracker to PyTorch's CUDA caching allocator
(`c10::cuda::CUDACachingAllocator::attachAllocatorTraceTracker`), which raises no event any Python check could
see. forward() computes seven eighths of the rows on the current stream and leaves the last eighth pending; the
tracker launches the pending kernels at the next allocation that is not the candidate's own, which is the
harness's after the batch's last event (its clone of the output, under the judge before the window's copies), so
the answer is right by the time it is read and an eighth of the work is in no event, a time well inside the
speed-of-light limit (the judge before the window's copies ranked it correct at 0.817 ms on an H200). The judge
copies each output inside the window, before the device-wide synchronisation that ends its host clock, and
compares the outputs with those copies once it has allocated again.

expect: tamper_detected
task: kl_div
diagnosis: changed after the batch's last event
"""
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cuda_source = r"""
#include <torch/extension.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAStream.h>
#include <cuda_runtime.h>
#include <utility>
#include <vector>

namespace alloc = c10::cuda::CUDACachingAllocator;

constexpr int THREADS = 512;

__device__ __forceinline__ float kl_term(float t, float p) { return t > 0.f ? t * logf(t / p) : 0.f; }

__global__ void __launch_bounds__(THREADS) kl_partial(const float* __restrict__ p, const float* __restrict__ t,
                                                      int64_t n, float* __restrict__ partial) {
    __shared__ float warp_sums[THREADS / 32];
    float acc = 0.f;
    for (int64_t i = (int64_t)blockIdx.x * THREADS + threadIdx.x; i < n; i += (int64_t)gridDim.x * THREADS)
        acc += kl_term(__ldg(t + i), __ldg(p + i));
    for (int o = 16; o > 0; o >>= 1) acc += __shfl_xor_sync(0xffffffff, acc, o);
    if ((threadIdx.x & 31) == 0) warp_sums[threadIdx.x >> 5] = acc;
    __syncthreads();
    if (threadIdx.x < 32) {
        acc = threadIdx.x < THREADS / 32 ? warp_sums[threadIdx.x] : 0.f;
        for (int o = 16; o > 0; o >>= 1) acc += __shfl_xor_sync(0xffffffff, acc, o);
        if (threadIdx.x == 0) partial[blockIdx.x] = acc;
    }
}

__global__ void kl_finish(const float* __restrict__ partial, int blocks, double scale, float* __restrict__ out,
                          bool accumulate) {
    __shared__ double sums[1024];
    double v = 0.0;
    for (int i = threadIdx.x; i < blocks; i += blockDim.x) v += (double)partial[i];
    sums[threadIdx.x] = v;
    __syncthreads();
    for (int s = blockDim.x / 2; s > 0; s >>= 1) {
        if (threadIdx.x < s) sums[threadIdx.x] += sums[threadIdx.x + s];
        __syncthreads();
    }
    if (threadIdx.x == 0) out[0] = (float)(sums[0] * scale) + (accumulate ? out[0] : 0.f);
}

struct Part {
    torch::Tensor p, t, partial, out;
    int64_t n;
    int blocks;
    double scale;
};

static std::vector<Part> pending, finished;
static bool in_forward = false, launching = false, attached = false;

static void launch(const Part& w, bool accumulate) {
    auto stream = c10::cuda::getCurrentCUDAStream(w.p.device().index());
    kl_partial<<<w.blocks, THREADS, 0, stream>>>(w.p.data_ptr<float>(), w.t.data_ptr<float>(), w.n,
                                                 w.partial.data_ptr<float>());
    kl_finish<<<1, 1024, 0, stream>>>(w.partial.data_ptr<float>(), w.blocks, w.scale, w.out.data_ptr<float>(),
                                      accumulate);
}

// Runs inside the allocator (its lock held): launches only, no allocation and no free.
static void on_trace(const alloc::TraceEntry& entry) {
    if (entry.action_ != alloc::TraceEntry::ALLOC || in_forward || launching || pending.empty()) return;
    launching = true;
    for (const auto& w : pending) launch(w, true);
    for (auto& w : pending) finished.push_back(std::move(w));
    pending.clear();
    launching = false;
}

static int blocks_for(int64_t n, int device) {
    int sms = 0;
    cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device);
    return (int)std::max<int64_t>(1, std::min<int64_t>((int64_t)sms * 4, (n + THREADS - 1) / THREADS));
}

torch::Tensor kl_mostly_now(torch::Tensor predictions, torch::Tensor targets) {
    in_forward = true;
    if (!attached) {
        alloc::attachAllocatorTraceTracker(on_trace);
        attached = true;
    }
    finished.clear();  // freed here, outside the allocator
    auto p = predictions.contiguous(), t = targets.contiguous();
    const int64_t rows = p.size(0), cols = p.numel() / rows, later = std::max<int64_t>(1, rows / 8);
    const int64_t now_n = (rows - later) * cols, later_n = later * cols;
    const int device = p.device().index();
    auto out = torch::empty({}, p.options());
    Part now{p, t, torch::empty({blocks_for(now_n, device)}, p.options()), out, now_n, 0, 1.0 / (double)rows};
    now.blocks = (int)now.partial.numel();
    launch(now, false);
    Part rest{p.narrow(0, rows - later, later), t.narrow(0, rows - later, later),
              torch::empty({blocks_for(later_n, device)}, p.options()), out, later_n, 0, 1.0 / (double)rows};
    rest.blocks = (int)rest.partial.numel();
    pending.push_back(std::move(rest));
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    in_forward = false;
    return out;
}
"""

cpp_source = "torch::Tensor kl_mostly_now(torch::Tensor predictions, torch::Tensor targets);"

ext = load_inline(name="kl_allocator_deferred", cpp_sources=cpp_source, cuda_sources=cuda_source,
                  functions=["kl_mostly_now"], extra_cuda_cflags=["-O3"], verbose=False)


class ModelNew(nn.Module):
    def forward(self, predictions, targets):
        return ext.kl_mostly_now(predictions, targets)
