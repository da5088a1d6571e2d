r"""Class 14 (issue 39): a self-renewing `weakref.finalize` does each timed call's work as the inputs exist.

At import the candidate lowers the collector's first threshold to 1 and leaves one object in a reference cycle with
a `weakref.finalize` on it (weakref's own registry, which the judge does not read): the harness's next allocation
starts a collection that frees the cycle and calls the finaliser, which arms a fresh one. It takes the current frame
from native code (`PyEval_GetFrame`, no audit event) and, when a frame below it is timing a batch whose inputs exist,
runs the candidate's real kernel on each input set; forward() answers from the stored result. Before issue 39 this
fired during `arm`, outside the timed round trip (1.4-1.9x its honest speed on the CPU). Now the inputs are made
inside `go`: the work is inside the round trip the parent measures, and a claim that leaves it out is refused.

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
pybind11::object current_frame() {
    PyObject* frame = (PyObject*)PyEval_GetFrame();  // native: no audit event, no registry
    if (frame == nullptr) return pybind11::none();
    return pybind11::reinterpret_borrow<pybind11::object>(frame);
}
"""
ext = load_inline(name="c14_weakref_finalize", cpp_sources=cpp_source, functions=["kl_div", "current_frame"],
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


_BATCHES = ("time_cpu_batch", "time_cuda_batch")


def _harvest() -> None:
    """From a finalizer: the harness frame that is timing a batch, if it is on the stack and has made its inputs."""
    frame = ext.current_frame()
    for _ in range(8):
        if frame is None:
            return
        if frame.f_code.co_name in _BATCHES:
            for inputs in frame.f_locals.get("sets") or ():
                if len(inputs) == 2:
                    _work(*inputs)
            return
        frame = frame.f_back


class _Node:
    pass


def _arm() -> None:
    node = _Node()
    node.me = node  # a cycle: freed only by a collection
    weakref.finalize(node, _fired).atexit = False  # not at exit: each call arms the next one


def _fired() -> None:
    try:
        _harvest()
    finally:
        _arm()


if HIDE:
    import gc

    gc.set_threshold(1)
    _arm()
