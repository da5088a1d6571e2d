r"""Class 14 (issue 39): a native allocator observer does the work at the harness's allocations.

An observer of every allocation, native, in no registry the judge checks and with no audit event. On the CPU the
extension wraps the process's CPU allocator (`c10::SetCPUAllocator` at a higher priority than the default: every CPU
tensor's memory passes through it); it hands out the default allocator's memory, then takes the GIL and the current
frame (`PyEval_GetFrame`). On CUDA it attaches a trace tracker to the caching allocator
(`attachAllocatorTraceTracker`), which queues a pending call that the interpreter runs as soon as the allocating
operator returns. Either runs the candidate's real kernel on the timed inputs it finds: the generator's final line
allocates the predictions when the targets exist and the predictions' logits are final (the trigger computes the
softmax itself), or the batch's `sets`. forward() answers from the stored result. (c10's memory reporter, the
profiler's `ThreadLocalDebugInfo` slot, is the third observer: pushed by a candidate it makes the judge's own trace
fail to start, `runtime_error`. `_record_memory_history` and the out-of-memory observer run no candidate code at an
ordinary allocation; `c12_allocator_trace_deferred.py` uses the tracker to defer work past the window.) Before issue
39 the inputs existed from `arm` on, outside the timed round trip; now they are made inside `go`, so this work is
inside the round trip the parent measures (the sandbox's CPU time on the CPU, the device's span before the first call
on a GPU), and a claim that leaves it out is refused.

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
#include <c10/core/CPUAllocator.h>
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
static pybind11::object* observer_callback = nullptr;  // leaked on purpose: it lives as long as the process
static thread_local bool observing = false;
static void notify() {
    if (observing || observer_callback == nullptr) return;
    observing = true;
    PyGILState_STATE gil = PyGILState_Ensure();  // torch released it around the operator
    PyObject *type, *value, *trace;
    PyErr_Fetch(&type, &value, &trace);
    PyObject* result = PyObject_CallNoArgs(observer_callback->ptr());
    if (result == nullptr) PyErr_Clear(); else Py_DECREF(result);
    PyErr_Restore(type, value, trace);
    PyGILState_Release(gil);
    observing = false;
}
// The process's CPU allocator, wrapped: every CPU tensor's memory passes through it (c10::SetCPUAllocator, native:
// in no registry the judge checks, no audit event). It hands out the default allocator's memory, then reports.
struct Observing final : c10::Allocator {
    explicit Observing(c10::Allocator* inner) : inner_(inner) {}
    c10::DataPtr allocate(size_t n) override {
        c10::DataPtr data = inner_->allocate(n);
        if (n > 0) notify();
        return data;
    }
    c10::DeleterFnPtr raw_deleter() const override { return inner_->raw_deleter(); }
    void copy_data(void* dest, const void* src, std::size_t count) const override {
        inner_->copy_data(dest, src, count);
    }
    c10::Allocator* inner_;
};
void observe_allocations(pybind11::object callback) {
    observer_callback = new pybind11::object(callback);
    static Observing wrapper(c10::GetCPUAllocator());
    c10::SetCPUAllocator(&wrapper, /*priority=*/100);
}
"""
ext = load_inline(name="c14_allocator_observer", cpp_sources=cpp_source, functions=["kl_div", "current_frame", "observe_allocations"],
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

if HIDE:
    ext.observe_allocations(_harvest)
