r"""Hostile: computes honestly, then forges the timed call's reply on the result channel with a tiny time.

No object the judge watches is patched. During a timed call (`go`) it writes its own `go` reply, claiming
1 us, straight to the result pipe, points the pipe at /dev/null so the harness's genuine reply is lost,
and puts the pipe back when the call's inputs are freed (during `inspect`, before its reply), so the
protocol stays in step. Only the parent's own clock around each round trip can see the lie.

expect: tamper_detected
task: kl_div
diagnosis: far below what the judge's own clock measured
"""
import json
import os
import struct
import sys
import weakref

import torch
from torch import nn
from torch.utils.cpp_extension import load_inline

ext = load_inline(name="forged_go_touch", cpp_sources="torch::Tensor touch(torch::Tensor x) { return x; }",
                  functions=["touch"], verbose=False)
RES_FD = int(sys.argv[sys.argv.index("--res-fd") + 1])
_calls = [0]
REPEAT = 30


def _restore(saved: int) -> None:
    os.dup2(saved, RES_FD)
    os.close(saved)


class ModelNew(nn.Module):
    def forward(self, predictions, targets):
        p, t = ext.touch(predictions).double(), targets.double()
        # The honest work, done REPEAT times (~6 ms a call accounted on the 2-core CI machine): what the kernel
        # accounts must stand clear of the floor's RUN_NOISE_MS (0.1 ms) on a quiet host too. A single computation
        # stays under it there, the CPU-time floor reads zero, and only the speed-of-light rule could refuse the
        # forgery, while this file is about the judge's own clock.
        for _ in range(REPEAT):
            out = ((torch.xlogy(t, t) - t * p.log()).sum() / p.shape[0]).float()
        # Told apart by counting, not by walking the stack to `go`: taking a frame is itself reported.
        _calls[0] += sys.getprofile() is None  # the judge's profiler watches the trials
        if sys.getprofile() is not None or _calls[0] <= 4:
            return out  # a trial or the estimate's four calls: answer honestly
        payload = out.reshape(1).numpy().tobytes()
        body = json.dumps({"op": "go", "ok": True, "dtype": "float32", "shape": [], "time_ms": 0.001,
                           "times_ms": [0.001], "event_ms": None, "host_ms": 0.001, "hidden_work": False,
                           "made_ms": 0.1, "payload_sizes": [len(payload)]}).encode()
        os.write(RES_FD, struct.pack("<Q", len(body)) + body + payload)
        saved = os.dup(RES_FD)
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, RES_FD)
        os.close(devnull)
        weakref.finalize(predictions, _restore, saved)
        return out
