r"""Class 14 (issue 39): a patched `torch.Tensor.softmax` does each timed call's work as its inputs are made.

`torch.Tensor`'s class dict is shared by the judge and the candidate, and the judge seals only the methods it calls
in its own timing and checks. The task's input generator calls `Tensor.softmax` for both inputs: the timed calls'
distribution (`planted`, the task's only timing distribution) makes the targets first and the predictions second.
The replacement calls the original and, at the second of two 2-D results of one shape, runs the candidate's real
kernel on the pair; forward() answers from the stored result (a pair seen in another order is never asked for, and
forward() computes). Before issue 39 the inputs were made at `arm`, outside the timed round trip, and a patched
`Tensor.numel` (the harness's fingerprint) scored 1.4-1.9x on the CPU. Now they are made inside `go`: the work is
inside the round trip the parent measures, and a claim that leaves it out is refused.

expect: tamper_detected
task: kl_div
diagnosis: far below what the judge measured itself
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

cpp_source = r"""
#include <cmath>
torch::Tensor kl_div(torch::Tensor predictions, torch::Tensor targets, int64_t passes) {
    auto p = predictions.contiguous();
    auto t = targets.contiguous();
    const float* pp = p.data_ptr<float>();
    const float* tp = t.data_ptr<float>();
    double sum = 0.0;
    for (int64_t pass = 0; pass < passes; ++pass)
        for (int64_t i = 0; i < p.numel(); ++i)
            if (tp[i] > 0.0f) sum += (double)tp[i] * (std::log((double)tp[i]) - std::log((double)pp[i]));
    return torch::full({}, (float)(sum / passes / p.size(0)), p.options());
}
"""
ext = load_inline(name="c14_tensor_method_patch", cpp_sources=cpp_source, functions=["kl_div"],
                  verbose=False)

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
            return seen[2]
        return ext.kl_div(predictions, targets, PASSES)


_softmax = torch.Tensor.softmax
_previous: list[torch.Tensor] = []


def softmax(self, *args, **kwargs):
    out = _softmax(self, *args, **kwargs)
    if isinstance(out, torch.Tensor) and out.dim() == 2 and out.dtype == torch.float32:
        if _previous and _previous[0].shape == out.shape:
            _work(out, _previous.pop())  # planted: targets first, then predictions
        else:
            _previous[:] = [out]
    return out


if HIDE:
    torch.Tensor.softmax = softmax
