"""The execution child's identity snapshot of every object the judge relies on in its process (`Integrity`), taken
before the candidate exists and compared after every step; the threat model is sandbox/child/harness.py's.
"""

from __future__ import annotations

import builtins  # noqa: F401 - watched by Integrity (sys.modules lookup)

import inspect
import json  # noqa: F401 - watched by Integrity (sys.modules lookup)
import sys
import types
from types import MappingProxyType
from typing import Any

import torch

from sandbox.child import audit as _audit
from sandbox.child import hook_registries as _hook_registries


def _resolve(path: str) -> Any:
    module_name, _, attr_path = path.partition(":")
    obj: Any = sys.modules[module_name]
    for part in attr_path.split(".") if attr_path else []:
        # Static lookup: `Tensor.__torch_function__` is a classmethod, a fresh bound object per getattr.
        obj = inspect.getattr_static(obj, part)
    return obj


_WATCHED = [
    "time:perf_counter", "time:monotonic", "time:perf_counter_ns",
    "torch:cuda.synchronize", "torch:cuda.Event", "torch:cuda.Event.record", "torch:cuda.Event.elapsed_time",
    "torch:cuda.Event.synchronize", "torch:cuda.max_memory_allocated", "torch:cuda.reset_peak_memory_stats",
    "torch:cuda.memory_allocated",
    "torch:allclose", "torch:isclose", "torch:equal", "torch:testing.assert_close", "torch:sum", "torch:arange",
    "torch:zeros", "torch:empty", "torch:frombuffer", "torch:index_select", "torch:cuda.current_stream",
    "torch:Tensor", "torch:Tensor.__torch_function__", "torch:Tensor.__torch_dispatch__", "torch:Tensor.cpu",
    "torch:Tensor.to", "torch:Tensor.detach", "torch:Tensor.clone", "torch:Tensor.contiguous",
    "torch:Tensor.view", "torch:Tensor.sum", "torch:Tensor.zero_", "torch:Tensor.numpy", "torch:Tensor.untyped_storage",
    "torch:Tensor.copy_",
    "torch:nn.Module.__call__", "torch:nn.Module._call_impl",
    "torch:nn.functional.kl_div", "torch:nn.functional.cross_entropy", "torch:nn.functional.log_softmax",
    "torch:log", "torch:softmax", "torch:rand", "torch:randint", "torch:randn", "torch:Generator",
    "torch:utils.cpp_extension._run_ninja_build",  # the build guard (sandbox/child/no_build.py)
    "sys:exit", "sys:setprofile", "sys:getprofile", "sys:audit", "os:_exit", "os:write", "os:read", "os:listdir",
    "os:urandom", "gc:callbacks",
    "json:dumps", "json:loads", "builtins:type", "builtins:isinstance",
    # What builds every reply (sandbox/protocol.py, `Message.unvalidated`; `Child.reply` adds the checks with
    # `model_copy`): patched, they could drop the integrity fields from each reply on its way out.
    "pydantic.main:BaseModel.model_construct", "pydantic.main:BaseModel.model_copy",
]


class Integrity:
    """Identity snapshot of every object the judge relies on inside this process.

    Its snapshots are read-only mappings, and the instance itself is sealed in the audit hook (`Child.load`):
    code that reached it through a frame can neither edit a snapshot in place nor swap one unseen."""

    def __init__(self, harness_modules: list[types.ModuleType], operators: set[str] = frozenset()) -> None:
        self._objects = MappingProxyType({path: _resolve(path) for path in _WATCHED})
        # The dispatcher's table for every operator the harness itself runs (`harness_operators`): a
        # kernel the candidate registers on one of them (torch.library or TORCH_LIBRARY_IMPL, at any key)
        # would run candidate code inside the harness's steps, e.g. while `arm` makes a timed call's inputs.
        self._dispatch = MappingProxyType({op: torch._C._dispatch_dump(op) for op in sorted(operators)})
        self._modules = MappingProxyType({m.__name__: (m, MappingProxyType(dict(vars(m)))) for m in harness_modules})
        # Classes are mutable: patching DeviceClock.time_call leaves the module's dict unchanged.
        self._classes = MappingProxyType({
            f"{m.__name__}.{name}": (cls, MappingProxyType(dict(vars(cls))))
            for m in harness_modules for name, cls in vars(m).items()
            if isinstance(cls, type) and cls.__module__ == m.__name__
        })
        self.hooks = _hook_registries.HookBaseline.capture()
        """The judge's own hooks (gc callbacks, signal handlers, ...), before the candidate exists."""

    def changed(self) -> list[str]:
        changed, _ = _audit.findings()  # first: what the audit hook saw, and whether it still answers
        for path, original in self._objects.items():
            try:
                current = _resolve(path)
            except (AttributeError, KeyError):
                changed.append(f"{path} (deleted)")
                continue
            if current is not original:
                changed.append(path)
        for name, (module, snapshot) in self._modules.items():
            current = vars(module)
            for key, value in snapshot.items():
                if current.get(key, _MISSING) is not value and key not in _WARNINGS_ONLY:
                    changed.append(f"{name}.{key}")
            changed.extend(f"{name}.{key} (added)" for key in current.keys() - snapshot.keys() - _WARNINGS_ONLY)
        for name, (cls, snapshot) in self._classes.items():
            current = vars(cls)
            changed.extend(f"{name}.{key}" for key, value in snapshot.items()
                           if current.get(key, _MISSING) is not value)
            changed.extend(f"{name}.{key} (added)" for key in current.keys() - snapshot.keys())
        changed.extend(f"the dispatcher's kernels for {op}" for op, table in self._dispatch.items()
                       if torch._C._dispatch_dump(op) != table)
        changed.extend(_hook_registries.active_hooks(self.hooks))
        return changed


_MISSING = object()
_WARNINGS_ONLY = frozenset({"__warningregistry__"})
"""What `warnings.warn(stacklevel=n)` adds to the module of the frame it lands on (a harness frame, when a
candidate's forward() warns with stacklevel=4): read by the warnings machinery alone."""
