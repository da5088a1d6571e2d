"""The dispatcher, as the execution and build children guard it: the ATen operators the harness runs itself
(`harness_operators`, whose dispatcher tables `Integrity` watches) and the task's forbidden operators replaced by
tripwires before the candidate is imported (`Tripwires`), which a call from Python or from C++ sets off.
"""

from __future__ import annotations

import warnings
from typing import Any, Callable

import torch

from sandbox.child import audit as _audit
from sandbox.shared import compare as _compare


def harness_operators(task: Any, device: torch.device, also: Callable[[], object] | None = None) -> set[str]:
    """The ATen operators the harness runs outside the candidate's call: making every distribution's inputs,
    fingerprinting them, copying an output out (and whatever `also` runs: the training checks). Recorded by
    running them once, before the import, below autograd (a dispatch mode) and above it (a function mode,
    for composite operators such as softmax)."""
    from torch.overrides import TorchFunctionMode  # torch's mode classes: this probe's alone
    from torch.utils._python_dispatch import TorchDispatchMode  # (a private module of torch's)

    seen: set[str] = set()

    class Below(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # noqa: ANN001 - torch's protocol
            seen.add(func._schema.name)
            return func(*args, **(kwargs or {}))

    class Above(TorchFunctionMode):
        def __torch_function__(self, func, types, args=(), kwargs=None):  # noqa: ANN001 - torch's protocol
            name = getattr(func, "__name__", "")
            seen.update({f"aten::{name}", f"aten::{name.rstrip('_')}"})
            return func(*args, **(kwargs or {}))

    shape = (8, 64)  # the same operators as at full size, for a fraction of the cost
    with Above(), Below():
        for distribution in task.distributions:
            inputs = task.make_inputs(shape, distribution, 0, device)
            _compare.fingerprint(inputs)
            inputs[0].sum().detach().clone().cpu().contiguous()
        if also is not None:
            also()
    known = set()
    for op in seen:
        try:
            torch._C._dispatch_dump(op)
        except RuntimeError:
            continue  # a Python name with no operator of that name
        known.add(op)
    return known



class Tripwires:
    _KEYS = ("CompositeImplicitAutograd", "CompositeExplicitAutograd", "CPU", "CUDA")

    def __init__(self, aten_ops: frozenset[str]) -> None:
        self.hits: list[str] = []
        self._library = torch.library.Library("aten", "IMPL")
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # overriding aten kernels warns by design
            for op in sorted(aten_ops):
                name = op.split("::", 1)[1]
                for key in self._KEYS:
                    try:
                        self._library.impl(name, self._tripwire(op), key)
                    except RuntimeError:
                        pass  # the op has no kernel slot for this key (e.g. a composite op on CPU)

    def _tripwire(self, op: str) -> Callable[..., Any]:
        hits = self.hits

        def tripwire(*args: Any, **kwargs: Any) -> Any:
            hits.append(op)
            _audit.tripwire(op)  # a record frames cannot clear (sandbox/child/audit.py)
            raise RuntimeError(f"{op} is forbidden for this task: write the computation yourself")

        return tripwire
