"""The registries through which candidate code would run inside a harness step without an audit event, checked
against what the judge itself had before the import (`HookBaseline`): gc callbacks, signal handlers and interval
timers, sys.monitoring tools, threading's trace and profile functions, the unraisable hook, torch modes and
saved-tensor hooks. `active_hooks` is read at every reply and (the quick ones) at the end of every timed batch.
The audit hook (sandbox/child/audit.py) covers what raises an event; these raise none.
"""

from __future__ import annotations

import _thread
import gc
import signal
import sys
import threading
from dataclasses import dataclass
from typing import Any

import torch

_ITIMERS = (("ITIMER_REAL", signal.ITIMER_REAL), ("ITIMER_VIRTUAL", signal.ITIMER_VIRTUAL),
            ("ITIMER_PROF", signal.ITIMER_PROF))
_MONITORING_TOOLS = range(6)
_SIGNALS = tuple(sorted(signal.valid_signals()))


@dataclass(frozen=True, kw_only=True)
class HookBaseline:
    """The judge's own hooks, before the candidate exists: anything else later is the candidate's."""

    gc_callbacks: tuple[Any, ...]
    signal_handlers: tuple[Any, ...]
    unraisablehook: Any
    python_threads: int
    monitoring_tools: tuple[str | None, ...]

    @classmethod
    def capture(cls) -> HookBaseline:
        return cls(gc_callbacks=tuple(gc.callbacks), signal_handlers=tuple(map(signal.getsignal, _SIGNALS)),
                   unraisablehook=sys.unraisablehook, python_threads=_thread._count(),
                   monitoring_tools=_monitoring_tools())


def _monitoring_tools() -> tuple[str | None, ...]:
    monitoring = getattr(sys, "monitoring", None)  # Python 3.12+
    return tuple(monitoring.get_tool(i) for i in _MONITORING_TOOLS) if monitoring is not None else ()


def active_hooks(base: HookBaseline, *, quick: bool = False) -> list[str]:
    """Hooks through which candidate code would run inside the judge's own steps (e.g. while `arm` makes a
    timed call's inputs, or after a batch's last event). `quick`: only those a timed batch's end can afford
    (a few microseconds): what could still fire after the window closes."""
    # First: a sys.monitoring tool's callback could run at any line below.
    hooks = [f"sys.monitoring tool {i} ({now})" for i, (now, then)
             in enumerate(zip(_monitoring_tools(), base.monitoring_tools)) if now != then]
    if sys.gettrace() is not None:
        hooks.append("sys.settrace (a tracer is installed)")
    if sys.getprofile() is not None:
        hooks.append("sys.setprofile (a profiler is installed)")
    if torch._C._len_torch_function_stack():
        hooks.append("torch function mode (left entered)")
    if torch._C._len_torch_dispatch_stack():
        hooks.append("torch dispatch mode (left entered)")
    callbacks = tuple(gc.callbacks)
    if len(callbacks) != len(base.gc_callbacks) or any(a is not b for a, b in zip(callbacks, base.gc_callbacks)):
        hooks.append("gc.callbacks (a garbage-collector callback is registered)")
    hooks.extend(f"signal.setitimer({name}) (an interval timer is armed)" for name, which in _ITIMERS
                 if signal.getitimer(which) != (0.0, 0.0))
    if quick:
        # A reply counts the threads itself (the parent's rule "threads"); a batch's end has no reply of its own.
        if _thread._count() > base.python_threads:
            hooks.append("a Python thread was alive when the batch ended")
        return hooks
    handlers = tuple(map(signal.getsignal, _SIGNALS))
    hooks.extend(f"signal handler for {signal.Signals(sig).name}" for sig, now, then
                 in zip(_SIGNALS, handlers, base.signal_handlers) if now is not then)
    if threading.gettrace() is not None:
        hooks.append("threading.settrace (a tracer for new threads)")
    if threading.getprofile() is not None:
        hooks.append("threading.setprofile (a profiler for new threads)")
    if sys.unraisablehook is not base.unraisablehook:
        hooks.append("sys.unraisablehook (replaced)")
    if torch._C._autograd._top_saved_tensors_default_hooks(True) is not None:
        hooks.append("torch.autograd.graph.saved_tensors_hooks (left entered)")
    return hooks
