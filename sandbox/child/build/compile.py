"""The build child (`python -m sandbox.child compile`): import the candidate once, with the judge's faster builds
installed (sandbox/child/build/hooks.py), so that its load_inline extensions build here and never in the execution
child; construct ModelNew on the CPU and precompile a JIT language's kernels for the judged shapes; report a
`BuildReply`. Untrusted once the candidate is imported, like the execution child: it decides nothing but whether
the build failed, and the parent reads its build directory itself.
"""

from __future__ import annotations

import json
import os
import sys
import time
import types

import torch

from reference import TaskId, get_task
from sandbox.child.build import hooks as build_hooks
from sandbox.shared import languages as _languages
from sandbox.child import loading as _loading
from sandbox import protocol as _protocol
from sandbox.child.failures import error_info
from sandbox.child.operators import Tripwires


def _is_build_failure(message: str) -> bool:
    """torch's words for a compile or link that failed (cpp_extension's RuntimeError)."""
    return "Error building extension" in message or "Error compiling objects" in message


def _construct_for_build(module: types.ModuleType) -> None:
    """Construct ModelNew once, on the CPU, so that extensions built in its __init__ (as many model-written
    candidates do) are built here too: the execution child never builds (sandbox/child/no_build.py). This child has
    no device, so an __init__ that needs one fails here and not there: only a failed build counts; anything
    else is one line in the build log, and the execution child constructs it for real."""
    model_cls = getattr(module, "ModelNew", None)
    if not isinstance(model_cls, type) or not issubclass(model_cls, torch.nn.Module):
        return
    try:
        model_cls()
    except Exception as exc:  # noqa: BLE001 - the candidate's __init__, judged again in the execution child
        info = error_info(exc)
        if _is_build_failure(info.message):
            raise
        print(f"[judge] ModelNew() did not finish in the build child, which has no device ({info.type}: "
              f"{info.message[:300]}); extensions it built before that are kept", file=sys.stderr, flush=True)


def precompile_jit(module: types.ModuleType, task_id: TaskId) -> None:
    """Call ModelNew once per judged shape so that a JIT language whose compile the execution child finds again
    (languages.PRECOMPILED: TileLang, through its cache in the build directory) compiles here, in the build
    stage, and not while the device is held. The inputs are uninitialised host tensors of each shape (the first
    dimensions of the task's shape, one per input dimension: (rows, cols) and (rows,)), never filled and so
    costing no memory; this child has no device, so the call ends when the kernel is launched, after the compile
    it was for. Only a compile failure matters here, and it shows again in the execution child: anything the
    call raises is one line in the build log."""
    shapes = json.loads(os.environ.get(_languages.JIT_SHAPES_ENV, "[]"))
    model_cls = getattr(module, "ModelNew", None)
    if not shapes or not any(name in sys.modules for name in _languages.PRECOMPILED) or not isinstance(model_cls, type):
        return
    task = get_task(task_id)
    kinds = task.make_inputs(task.cpu_shape, "official", 0, torch.device("cpu"))
    try:
        model = model_cls()
    except Exception:  # noqa: BLE001 - __init__ failing here was reported by _construct_for_build
        return
    for shape in shapes:
        inputs = [torch.empty(shape[:kind.dim()], dtype=kind.dtype) for kind in kinds]
        started = time.monotonic()
        try:
            model(*inputs)
        except Exception as exc:  # noqa: BLE001 - the launch fails here, with no device: expected
            print(f"[judge] precompiled for {shape} in {time.monotonic() - started:.1f} s (the call then ended with "
                  f"{type(exc).__name__}: {str(exc)[:200]})", file=sys.stderr, flush=True)


def compile_only(task_id: TaskId, source_path: str, res_fd: int) -> None:
    """Import the candidate once so its load_inline extensions build; report how that went."""
    task = get_task(task_id)
    accel, slim = os.environ.get("JUDGE_BUILD_ACCEL"), os.environ.get("JUDGE_SLIM_HEADERS") == "1"
    if accel or slim:  # the judge's faster builds: a precompiled header, slim headers (sandbox/child/build/hooks.py)
        build_hooks.install(accel, slim_headers=slim, pch_subset=os.environ.get("JUDGE_PCH_SUBSET") != "0")
    tripwires = Tripwires(task.forbidden_aten_ops)
    started = time.monotonic()
    try:
        module = _loading.import_candidate(source_path)
        _construct_for_build(module)
        precompile_jit(module, task_id)
    except BaseException as exc:  # noqa: BLE001 - reported to the parent, which decides the verdict
        info = error_info(exc)
        _protocol.send(res_fd, _protocol.BuildReply.unvalidated(
            ok=False, build_failed=_is_build_failure(info.message), error=info,
            tripwire_hits=sorted(set(tripwires.hits)), seconds=time.monotonic() - started))
        return
    _protocol.send(res_fd, _protocol.BuildReply.unvalidated(ok=True, tripwire_hits=sorted(set(tripwires.hits)),
                                                            seconds=time.monotonic() - started))
