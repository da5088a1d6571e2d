r"""Class 14 (issue 39): a profile function set from native code does the work at every call.

A profiler sees every Python function the harness enters, with its frame. `sys.setprofile` is refused by the judge's
audit hook, so the candidate sets it from native code (`PyEval_SetProfile`, the C slot), or on Python 3.12+ with
`threading.setprofile_all_threads`. Its callback runs the candidate's real kernel on the timed inputs it finds from
the frame it is handed (the batch's `sets`, the generator's final line). `PyEval_SetProfile` raises the same audit
event as `sys.setprofile`: refused where the candidate asks (the hook is not installed, the refusal recorded:
`tamper_detected`); a profiler left installed is also seen at every reply. Had it run, its work would be inside `go`,
measured.

expect: tamper_detected
task: kl_div
diagnosis: sys.setprofile
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
#include <frameobject.h>
static pybind11::object* profile_callback = nullptr;  // leaked on purpose: it lives as long as the process
static int profile_fn(PyObject*, PyFrameObject* frame, int what, PyObject*) {
    if (what != PyTrace_CALL) return 0;  // every Python function the harness enters
    PyObject* result = PyObject_CallOneArg(profile_callback->ptr(), (PyObject*)frame);
    if (result == nullptr) PyErr_Clear(); else Py_DECREF(result);
    return 0;
}
// The C profiler slot, set from native code (no `sys.setprofile` call in Python).
void set_profile(pybind11::object callback) {
    profile_callback = new pybind11::object(callback);
    PyEval_SetProfile(profile_fn, nullptr);
}
"""
ext = load_inline(name="c14_native_profiler", cpp_sources=cpp_source, functions=["kl_div", "current_frame", "set_profile"],
                  verbose=False)

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
            return seen[1]
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

def _profile(frame, event=None, arg=None):
    _harvest(frame)
    return None


if HIDE:
    import threading

    if hasattr(threading, "setprofile_all_threads"):
        try:
            threading.setprofile_all_threads(_profile)
        except RuntimeError:
            pass
    ext.set_profile(_profile)
