r"""Class 13 (issue 25): the call's work runs in a thread that is joined before the reply, and the reply is forged.

On the CPU the child times each call by its host clock around forward(), so a thread joined inside forward()
is inside the timed interval, and one that outlives the call is refused as a stray thread: a dead thread alone
buys nothing. What it can do is hide work from the parent's check on a forged time. During a timed call (`go`)
this candidate runs its slow C++ kernel in a thread it starts, joins and waits out (until its task is gone from
/proc), writes its own `go` reply claiming a fifth of the CPU time the work took straight to the result pipe, and
points the pipe at /dev/null until the call's inputs are freed, so the harness's genuine reply is lost (as
tests/sandbox/candidates/forged_go_reply.py does).

Against the parent's CPU time of the round trip summed over the threads alive at the reading, the work vanished
with its thread: what was left was the main thread blocked in join() and the harness, and it was ranked `correct`
at its claimed time. The job's cgroup keeps what exited threads ran, so the round trip shows the work and the
claim is far below it (2-core CI machine: claims 0.95 ms per call; the floor 0.51 ms by the live threads, 3.43 ms
by the cgroup, 3.50 ms by the processes' clocks). Its claims stay far above the CPU speed-of-light limit (0.009
ms), so only the CPU-time bound can catch it. It needs no frame to know a timed call: the estimate's four calls
on one input set mark the end of the trials (ESTIMATE_CALLS).

expect: tamper_detected
task: kl_div
diagnosis: far below what the judge measured itself
"""
import json
import os
import struct
import sys
import threading
import time
import weakref

from torch import nn
from torch.utils.cpp_extension import load_inline

PASSES = 8
"""A slow kernel (the loss summed PASSES times over, averaged) that wants to look fast: the more work the dead
thread hides, the more a forged time gains against a floor that cannot see it."""

ext = load_inline(name="c13_dead_thread_work", cpp_sources=r"""
#include <cmath>
torch::Tensor kl_div(torch::Tensor predictions, torch::Tensor targets, int64_t passes) {
    auto p = predictions.contiguous();
    auto t = targets.contiguous();
    const float* pp = p.data_ptr<float>();
    const float* tp = t.data_ptr<float>();
    double sum = 0.0;
    for (int64_t pass = 0; pass < passes; ++pass) {
        for (int64_t i = 0; i < p.numel(); ++i) {
            if (tp[i] > 0.0f) sum += (double)tp[i] * (std::log((double)tp[i]) - std::log((double)pp[i]));
        }
    }
    return torch::full({}, (float)(sum / passes / p.size(0)), p.options());
}
""", functions=["kl_div"], verbose=False)
RES_FD = int(sys.argv[sys.argv.index("--res-fd") + 1])
ESTIMATE_CALLS = 4
"""The judge's estimate calls forward() this many times on one input set, after the trials and before the timed
batches: this candidate tells the phases apart by that alone (no frame, no garbage-collector walk)."""


def _wait_until_gone(tid: int) -> None:
    """join() returns when the thread's Python state is released, before its kernel task has exited; on a loaded
    machine that task can still be listed when the parent reads, its time with it. Wait until it is gone."""
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

    def forward(self, predictions, targets):
        key = (predictions.data_ptr(), tuple(predictions.shape), predictions.reshape(-1)[:4].tolist())
        self.repeats = self.repeats + 1 if key == self.last else 1
        self.last = key
        if self.repeats == ESTIMATE_CALLS:
            self.timing, self.shape = True, tuple(predictions.shape)
        if not self.timing or self.repeats > 1 or tuple(predictions.shape) != self.shape:
            return ext.kl_div(predictions, targets, PASSES)  # trials, estimate, extra shapes: honest, this thread
        box = {}

        def work() -> None:
            started = time.thread_time()
            box["out"] = ext.kl_div(predictions, targets, PASSES)
            box["cpu_ms"] = (time.thread_time() - started) * 1e3

        worker = threading.Thread(target=work)
        worker.start()
        worker.join()
        _wait_until_gone(worker.native_id)  # no thread is left alive when the parent reads the sandbox's CPU time
        out = box["out"]
        payload = out.reshape(1).numpy().tobytes()
        # A fifth of the CPU time the work took (CPU time, which load does not stretch as it does wall time): far
        # enough under the bound (MIN_CLAIM_FRACTION, 0.3 on the CPU) that host load cannot decide the side, and a
        # claim that gains if it passes (one near the bound would be ranked at the parent's floor by cpu_scale).
        claim = box["cpu_ms"] / 5
        body = json.dumps({"op": "go", "ok": True, "dtype": "float32", "shape": [], "time_ms": claim,
                           "times_ms": [claim], "event_ms": None, "host_ms": claim, "hidden_work": False,
                           "made_ms": 0.5, "payload_sizes": [len(payload)]}).encode()
        os.write(RES_FD, struct.pack("<Q", len(body)) + body + payload)
        saved = os.dup(RES_FD)
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, RES_FD)
        os.close(devnull)
        weakref.finalize(predictions, _restore, saved)
        return out
