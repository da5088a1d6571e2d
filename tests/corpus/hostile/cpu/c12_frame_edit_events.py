r"""Class 12 (issue 25): reaches the timing loop's own locals through the stack and edits them.

From forward() it walks `sys._getframe(0).f_back` up to the judge's batch timing function and edits what it
finds there: the event pairs around each call (replaced by events around nothing, on a GPU) and the host
times already measured (halved, on the CPU). Nothing in a watched module or class dictionary changes. The
timing loop keeps its events and calls in tuples, reads its clock once before the first call, and the judge's
audit hook records candidate code taking a frame: every frame reaches the harness's through `f_back`.

expect: tamper_detected
task: cross_entropy
diagnosis: sys\._getframe
"""
import sys

import torch
import torch.nn as nn


def _edit_timing_frame():
    frame = sys._getframe(0).f_back
    while frame is not None:
        if frame.f_code.co_name in ("time_cuda_batch", "time_cpu_batch"):
            local = frame.f_locals
            events, times = local.get("events"), local.get("times")
            try:
                if events is not None:
                    for i in range(len(events)):
                        pad_start, pad_end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                        pad_start.record()
                        pad_end.record()
                        events[i] = (pad_start, pad_end)
                if times is not None:
                    times[:] = [t / 2 for t in times]
            except TypeError:
                pass  # a tuple: nothing to replace in place
            return
        frame = frame.f_back


class ModelNew(nn.Module):
    def forward(self, predictions, targets):
        _edit_timing_frame()
        x = predictions - predictions.max(1, keepdim=True).values
        return (x.exp().sum(1).log() - x.gather(1, targets[:, None]).squeeze(1)).mean()
