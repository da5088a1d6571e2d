r"""Class 14 (issue 39): a `sys.meta_path` finder and a `sys.path_hooks` entry do the work at imports.

Both are lists in `sys` that the judge does not hold (no audit event appends to them). The finder is put first, so
every import of a module not yet loaded asks it before any of Python's own finders; the path hook is put first and the
importer cache cleared, so the next import through any directory asks it too. Each answers "not mine" after taking the
current frame from native code (`PyEval_GetFrame`) and running the candidate's real kernel on whatever timed inputs it
finds (the batch's `sets`, or the generator's final line). The harness imports nothing while it makes a timed call's
inputs (every module it uses is loaded before the candidate): the hooks never fire with inputs in reach, forward()
does the work, and it gains nothing (`correct`, no faster than its honest twin:
`tests/sandbox/test_registry_attacks.py`). Were an import to happen there, it would be inside `go`, measured.

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
ext = load_inline(name="c14_import_hooks", cpp_sources=cpp_source, functions=["kl_div", "current_frame"],
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

class _Finder:
    """Asked first for every module not yet loaded: works, then answers "not mine"."""

    @staticmethod
    def find_spec(name, path=None, target=None):
        _harvest()
        return None

    @staticmethod
    def invalidate_caches() -> None:
        pass


def _path_hook(entry: str) -> None:
    _harvest()
    raise ImportError(entry)  # not mine: the next hook is asked


if HIDE:
    sys.meta_path.insert(0, _Finder)
    sys.path_hooks.insert(0, _path_hook)
    sys.path_importer_cache.clear()  # every directory is asked of the hooks again at its next import
