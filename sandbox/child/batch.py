"""A timed batch's state in the execution child: what `arm` prepared (`Armed`), the allocator's counters around its
calls (`DeviceMemory`), and the empty call that calibration times (`null_model`).
"""

from __future__ import annotations

from typing import Callable

import torch

from sandbox.child import window as _window


class Armed:
    """A batch `arm` prepared: how many calls, whether they are the empty calls of calibration, and the window's
    buffers."""

    __slots__ = ("calls", "shape", "null", "forward_only", "keeper")

    def __init__(self, *, calls: int, shape: tuple[int, ...], null: bool, forward_only: bool,
                 keeper: _window.Keeper) -> None:
        self.calls, self.shape, self.null, self.forward_only, self.keeper = calls, shape, null, forward_only, keeper


class DeviceMemory:
    """The allocator's counters around a batch's calls (sandbox/child/timing.py's `Memory`): the most allocated
    during them beyond what existed before the first (every call's inputs)."""

    def __init__(self, device: torch.device) -> None:
        self.device = device
        self.base = 0

    def begin(self) -> None:
        _reset_peak(self.device)
        self.base = _allocated(self.device)

    def peak(self) -> int:
        return _max_allocated(self.device) - self.base


_reset_peak = torch.cuda.reset_peak_memory_stats
_allocated = torch.cuda.memory_allocated
_max_allocated = torch.cuda.max_memory_allocated
def null_model(device: torch.device) -> Callable[..., torch.Tensor]:
    def model(*args: torch.Tensor) -> torch.Tensor:  # the empty call: no inputs, no work
        return torch.zeros((), device=device)
    return model
