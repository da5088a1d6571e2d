r"""Class 13 (issue 25), on the GPU: each timed call's work runs in a thread joined before the reply, and the
batch's reply is forged with a third of the time.

Each timed call starts a thread that launches a slow kernel (the loss computed PASSES times over, averaged) and
spins on the stream until it is done, then joins it and waits until its task is gone from /proc: the device work and
the host's whole wait are that thread's, and the main thread sleeps in join(). The candidate learns the batch's
length from the first timed batch (its calls follow each other at once, the next batch comes after a pause while the
judge arms fresh inputs). At the last call of every later batch it writes its own `go` reply (its outputs, each
call's time divided by three) straight to the result pipe, and points the pipe at /dev/null until the call's inputs
are freed, so the harness's genuine reply is lost (as the CPU version in tests/corpus/hostile/cpu/ does). No thread
but the main one is alive when a batch ends or when the parent reads the sandbox's CPU time, no signal handler is
installed, and nothing the judge seals is touched (a relay thread alive at the batch's end, or a SIGIO handler that
edits the genuine reply, are refused as such).

The CUDA events are honest but never reported, so only the parent's own measurements can see the lie. The CPU
time summed over the threads alive at the reading held only the harness's own work (the spinning threads had
exited), so a third of the real time passed that floor. The job's cgroup keeps what exited threads ran, and the
parent's wall window per batch holds the device work whoever waited for it: the claim is about a third of either.
A third of this kernel's time is still under half of the speed-of-light limit, so that rule cannot be what stops
it. The estimate's four calls on one input set mark the end of the trials (ESTIMATE_CALLS).

expect: tamper_detected
task: kl_div
diagnosis: (far below what the judge|device work the judge did not ask for)
"""
import json
import os
import struct
import sys
import threading
import time
import weakref

import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

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
torch::Tensor kl_div_passes(torch::Tensor predictions, torch::Tensor targets, int64_t passes) {
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

cpp_source = "torch::Tensor kl_div_passes(torch::Tensor predictions, torch::Tensor targets, int64_t passes);"

ext = load_inline(name="c13_dead_thread_work_cuda", cpp_sources=cpp_source, cuda_sources=cuda_source,
                  functions=["kl_div_passes"], extra_cuda_cflags=["-O3"], verbose=False)

PASSES = 8
"""Eight full passes: the call takes ~8x an honest one, so a claim of a third is still ~2.7x slower than honest
and far under the speed-of-light limit."""
RES_FD = int(sys.argv[sys.argv.index("--res-fd") + 1])
ESTIMATE_CALLS = 4
"""The judge's estimate calls forward() this many times on one input set, after the trials and before the timed
batches: this candidate tells the phases apart by that alone (no frame, no garbage-collector walk)."""
LENGTH = struct.Struct("<Q")
BATCH_GAP_S = 0.003
"""A batch's calls follow each other at once; between batches the judge arms fresh inputs (gigabytes drawn, their
truth computed in fp64), which takes far longer: a pause this long since the last call starts a batch."""


def _wait_until_gone(tid: int) -> None:
    """join() returns when the thread's Python state is released, before its kernel task has exited; on a loaded
    host that task can still be listed when the parent reads, its time with it. Wait until it is gone."""
    deadline = time.monotonic() + 2.0
    while os.path.exists(f"/proc/self/task/{tid}") and time.monotonic() < deadline:
        time.sleep(0.0002)


def _restore(saved: int) -> None:
    os.dup2(saved, RES_FD)
    os.close(saved)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.last, self.repeats, self.timing, self.shape = None, 0, False, None
        self.first_batch = 0  # calls seen of the first timed batch
        self.returned = 0.0  # when forward() last returned
        self.batch_calls = 0  # the batch's length, once learned
        self.done: list[tuple[bytes, float]] = []  # this batch's outputs and claims so far

    def _work(self, predictions, targets):
        """The call's work in a thread that is gone before forward() returns: (output, wall ms)."""
        box = {}
        stream = torch.cuda.current_stream()

        def work() -> None:
            with torch.cuda.stream(stream):
                box["out"] = ext.kl_div_passes(predictions, targets, PASSES)
            while not stream.query():  # the host's wait spins here, in a thread that will be gone
                pass

        started = time.perf_counter()
        worker = threading.Thread(target=work)
        worker.start()
        worker.join()
        _wait_until_gone(worker.native_id)
        return box["out"], (time.perf_counter() - started) * 1e3

    def _forge_reply(self, predictions) -> None:
        """Every output of the batch and a third of each call's time, written where the harness's reply would be."""
        payloads = [out for out, _ in self.done]
        claims = [ms / 3 for _, ms in self.done]
        mean = sum(claims) / len(claims)
        body = json.dumps({"op": "go", "ok": True, "dtype": "float32", "shape": [], "time_ms": mean,
                           "times_ms": claims, "event_ms": mean, "host_ms": mean, "hidden_work": False,
                           # A span before the calls long enough to pass for the judge's own (a lead and the making
                           # of kl_div's inputs take ~7 ms a call on an H100): charged, if longer, not refused as short.
                           "made_ms": 8.0 * len(claims), "gaps_ms": [0.09] * (len(claims) - 1),
                           "payload_sizes": [len(p) for p in payloads]}).encode()
        os.write(RES_FD, LENGTH.pack(len(body)) + body + b"".join(payloads))
        saved = os.dup(RES_FD)
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, RES_FD)
        os.close(devnull)
        weakref.finalize(predictions, _restore, saved)
        self.done = []

    def forward(self, predictions, targets):
        key = (predictions.data_ptr(), tuple(predictions.shape), predictions.reshape(-1)[:4].tolist())
        self.repeats = self.repeats + 1 if key == self.last else 1
        self.last = key
        if self.repeats == ESTIMATE_CALLS:
            self.timing, self.shape = True, tuple(predictions.shape)
        if not self.timing or self.repeats > 1 or tuple(predictions.shape) != self.shape:
            return ext.kl_div_passes(predictions, targets, PASSES)  # trials, estimate, extra shapes: this thread
        new_batch = time.perf_counter() - self.returned > BATCH_GAP_S
        out, ms = self._work(predictions, targets)
        if not self.batch_calls:  # the first timed batch: honest, learning its length
            if not new_batch or not self.first_batch:
                self.first_batch += 1
                self.returned = time.perf_counter()
                return out
            self.batch_calls = self.first_batch
        self.done.append((out.detach().cpu().reshape(1).numpy().tobytes(), ms))
        if len(self.done) == self.batch_calls:
            self._forge_reply(predictions)
        self.returned = time.perf_counter()
        return out
