r"""Class 14, GPU: a sys.monitoring callback, tool id freed, does each timed call's work as its inputs are made.

PEP 669 (Python 3.12+): the candidate takes a free tool id, registers a PY_RETURN callback, turns the event on for
one code object only (the task's `make_inputs`, which the harness calls to make every call's inputs) and frees the
tool id at once: `sys.monitoring.get_tool` then reads None, as before the import, so the judge's registry check
finds nothing, while the callback keeps firing on 3.12. The callback is handed the returned inputs and runs the
candidate's real kernel on them; forward() answers from the stored result. Before issue 39 the inputs were made at
`arm`, outside the timed round trip, and this ranked at a fraction of its honest time (0.754 ms against 1.66 on an
H100). Now they are made inside `go`: the work is inside the round trip the parent measures, and a claim that leaves
it out is refused.

Python 3.11 has no sys.monitoring: there the same callback is offered to `sys.setprofile` (its "return"
events carry the same value), which the judge's audit hook refuses and records. The 3.12 path runs on the GPU hosts.

The callback fires for every making of inputs, the correctness trials' too, so there forward() answers from the
store and runs none of the candidate's compiled code: the custom-kernel rule refuses it before any timing (an H200,
2026-11-28, docs/results/integrity-v4-h200-2026-11-28.md). Had it spared the trials, its timed work would be device
work between the batch's lead and its first call's start event, beyond the judge's own making of the same inputs,
charged to the calls (`unattributed_work`) or refused by the CPU-time or wall-clock bounds first, as its siblings are.

expect: policy_violation
task: kl_div
diagnosis: ran no code the candidate compiled
"""
import sys  # noqa: F401 - the trigger blocks below use it where they need it
import weakref

import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

HIDE = True
"""Whether the trigger is installed: False is the honest twin (the same kernel, every call's work in forward)."""
PASSES = 4
"""The candidate's own kernel: the loss summed PASSES times over, averaged. A slow kernel that wants to look fast:
the more work the trigger moves out of forward(), the plainer the gain, if there were one."""

cuda_source = r"""
#include <torch/extension.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAStream.h>
#include <cuda_runtime.h>

constexpr int THREADS = 512;

__device__ __forceinline__ float kl_term(float t, float p) { return t > 0.f ? t * logf(t / p) : 0.f; }

__global__ void __launch_bounds__(THREADS) kl_partial(const float* __restrict__ p, const float* __restrict__ t,
                                                      int64_t n, float* __restrict__ partial) {
    __shared__ float warp_sums[THREADS / 32];
    float acc = 0.f;
    for (int64_t i = (int64_t)blockIdx.x * THREADS + threadIdx.x; i < n; i += (int64_t)gridDim.x * THREADS)
        acc += kl_term(t[i], p[i]);
    for (int o = 16; o > 0; o >>= 1) acc += __shfl_xor_sync(0xffffffff, acc, o);
    if ((threadIdx.x & 31) == 0) warp_sums[threadIdx.x >> 5] = acc;
    __syncthreads();
    if (threadIdx.x < 32) {
        acc = threadIdx.x < THREADS / 32 ? warp_sums[threadIdx.x] : 0.f;
        for (int o = 16; o > 0; o >>= 1) acc += __shfl_xor_sync(0xffffffff, acc, o);
        if (threadIdx.x == 0) partial[blockIdx.x] = acc;
    }
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
    if (threadIdx.x == 0) out[0] += (float)(sums[0] * scale);
}

// The whole loss, `passes` times over (each pass a full read of both inputs), averaged.
torch::Tensor kl_div(torch::Tensor predictions, torch::Tensor targets, int64_t passes) {
    auto p = predictions.contiguous(), t = targets.contiguous();
    const int64_t rows = p.size(0), n = p.numel();
    int sms = 0;
    cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, p.device().index());
    const int blocks = (int)std::max<int64_t>(1, std::min<int64_t>((int64_t)sms * 4, (n + THREADS - 1) / THREADS));
    auto partial = torch::empty({blocks}, p.options());
    auto out = torch::zeros({}, p.options());
    auto stream = c10::cuda::getCurrentCUDAStream(p.device().index());
    for (int64_t pass = 0; pass < passes; ++pass) {
        kl_partial<<<blocks, THREADS, 0, stream>>>(p.data_ptr<float>(), t.data_ptr<float>(), n,
                                                   partial.data_ptr<float>());
        kl_finish<<<1, 1024, 0, stream>>>(partial.data_ptr<float>(), blocks, 1.0 / ((double)rows * passes),
                                          out.data_ptr<float>());
    }
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return out;
}
"""

cpp_source = r"""
torch::Tensor kl_div(torch::Tensor predictions, torch::Tensor targets, int64_t passes);
"""

ext = load_inline(name="c14_monitoring_freed_tool_cuda", cpp_sources=cpp_source, cuda_sources=cuda_source,
                  functions=["kl_div"], extra_cuda_cflags=["-O3"], verbose=False)

_answers: dict[tuple[int, int], tuple[weakref.ref, weakref.ref, torch.Tensor | None]] = {}
"""Answers worked out by the trigger, under the inputs' storage (None once forward() has taken one: worked once)."""


def _work(p: torch.Tensor, t: torch.Tensor) -> None:
    """The call's real work, on inputs the harness has just made, before forward() is called on them."""
    if not (isinstance(p, torch.Tensor) and isinstance(t, torch.Tensor)) or p.dim() != 2 or p.shape != t.shape:
        return
    key = (p.data_ptr(), t.data_ptr())
    seen = _answers.get(key)
    if seen is not None and seen[0]() is p and seen[1]() is t:
        return
    if len(_answers) > 64:
        _answers.clear()
    _answers[key] = (weakref.ref(p), weakref.ref(t), ext.kl_div(p, t, PASSES))


class ModelNew(nn.Module):
    def forward(self, predictions, targets):
        key = (predictions.data_ptr(), targets.data_ptr())
        seen = _answers.get(key)
        if seen is not None and seen[2] is not None and seen[0]() is predictions and seen[1]() is targets:
            _answers[key] = (seen[0], seen[1], None)
            return seen[2].clone()
        return ext.kl_div(predictions, targets, PASSES)


_task = sys.modules["".join(["refer", "ence.kl_div"])]  # the judge's task module, loaded before the candidate
_MAKE = _task.make_inputs.__code__


def _returned(code, offset, value) -> None:
    if isinstance(value, list) and len(value) == 2:
        _work(*value)


def _profile(frame, event, arg) -> None:
    if event == "return" and frame.f_code is _MAKE:
        _returned(_MAKE, 0, arg)


monitoring = getattr(sys, "monitoring", None)
if HIDE and monitoring is not None:
    tool = next(i for i in range(6) if monitoring.get_tool(i) is None)
    monitoring.use_tool_id(tool, "c14")
    monitoring.register_callback(tool, monitoring.events.PY_RETURN, _returned)
    monitoring.set_local_events(tool, _MAKE, monitoring.events.PY_RETURN)
    monitoring.free_tool_id(tool)  # get_tool(tool) reads None again; on 3.12 the event stays on
elif HIDE:
    try:
        sys.setprofile(_profile)
    except RuntimeError:
        pass  # refused: forward() computes, as an honest candidate would
