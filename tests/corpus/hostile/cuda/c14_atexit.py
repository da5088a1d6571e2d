r"""Class 14, GPU: an `atexit` callback, the one registry that runs only when the child ends.

`atexit.register` is in no registry the judge checks, and raises no audit event. But it runs at the interpreter's
exit, after the last batch's reply: no timed call's inputs exist then, and its answers could only reach a forward()
that has already been timed. The candidate registers the same frame harvester the other triggers use
(`PyEval_GetFrame`, the batch's `sets`), which finds nothing; forward() does every call's work itself. It gains
nothing, and the judge needs no defence for it: `correct`, ranked no faster than its honest twin
(`tests/sandbox/test_registry_attacks.py` judges both and compares).

expect: correct
task: kl_div
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
pybind11::object current_frame() {
    PyObject* frame = (PyObject*)PyEval_GetFrame();  // native: no audit event, no registry
    if (frame == nullptr) return pybind11::none();
    return pybind11::reinterpret_borrow<pybind11::object>(frame);
}
"""

ext = load_inline(name="c14_atexit_cuda", cpp_sources=cpp_source, cuda_sources=cuda_source,
                  functions=["kl_div", "current_frame"], extra_cuda_cflags=["-O3"], verbose=False)

_answers: dict[int, tuple[weakref.ref, torch.Tensor]] = {}
"""Answers worked out by the trigger, under the targets' storage (the targets are the very tensor forward() gets)."""
_busy = [False]


def _work(p: torch.Tensor, t: torch.Tensor) -> None:
    """The call's real work, on inputs the harness has made (or is making), before forward() is called on them."""
    if not (isinstance(p, torch.Tensor) and isinstance(t, torch.Tensor)) or p.dim() != 2 or p.shape != t.shape:
        return
    seen = _answers.get(t.data_ptr())
    if seen is not None and seen[0]() is t:
        return
    if len(_answers) > 64:
        _answers.clear()
    _answers[t.data_ptr()] = (weakref.ref(t), ext.kl_div(p, t, PASSES))


class ModelNew(nn.Module):
    def forward(self, predictions, targets):
        seen = _answers.pop(targets.data_ptr(), None)
        if seen is not None and seen[0]() is targets:
            return seen[1].clone()
        return ext.kl_div(predictions, targets, PASSES)


_BATCHES = ("time_cpu_batch", "time_cuda_batch")


def _last_line(code) -> int:
    return max(line for _, _, line in code.co_lines() if line is not None)


def _harvest(frame=None) -> None:
    """From the trigger: a harness frame timing a batch whose inputs exist, or the task's generator on its last line
    (`return [logits.softmax(dim=-1), targets]`: the targets made, the predictions' logits final)."""
    if _busy[0]:
        return
    _busy[0] = True
    try:
        frame = ext.current_frame() if frame is None else frame
        for _ in range(12):
            if frame is None:
                return
            code = frame.f_code
            if code.co_name in _BATCHES:
                for inputs in frame.f_locals.get("sets") or ():
                    if len(inputs) == 2:
                        _work(*inputs)
                return
            if code.co_name == "_planted" and frame.f_lineno == _last_line(code):
                local = frame.f_locals
                if "targets" in local and "logits" in local:
                    _work(local["logits"].softmax(dim=-1), local["targets"])
                return
            frame = frame.f_back
    except (RuntimeError, ValueError, TypeError, AttributeError, KeyError):
        pass  # a frame or an input not as expected: forward() will do the work
    finally:
        _busy[0] = False

if HIDE:
    import atexit

    atexit.register(_harvest)
