"""The device gate: keeps a spare's device set-up (sandbox/execution/warm.py) and a candidate's timed phases apart
on one device.

A spare's device set-up (context creation, the tripwires' probe calls, the clock's calibration, the calibration's
empty batches, the environment's reading) runs kernels and allocates device memory; beside a candidate being timed on
the same device it would perturb that candidate's times (time-slicing between contexts, memory traffic). So the
set-up runs as a sequence of short steps (`warming`), each holding the gate on its own: a step waits until no
candidate on that device is in a timed phase (`TIMED_STAGES`) or waiting for one, and a timed phase that starts while
a step runs waits for that step alone to end (at most `WARMING_WAIT_S`, then the spare is killed and replaced).
Between its steps the set-up gives the gate back, so a timed phase that asked meanwhile goes first and the set-up
resumes after it: a timed phase waits for at most one step (the longest is the child's own start of the device, which
cannot be split; the calibration's steps are one empty batch each), never for a whole set-up, and set-ups one after
another cannot keep a candidate from its timing. One step at a time per device: context creations beside one another
only queue in the driver. A wait, when there is one, is the candidate's device time and is recorded
(`device_gate_wait` in its stages).

The gate also counts the timed phases begun (`timed_begun`), so that the pool can tell whether the candidate it
handed out last is still in its untimed start (sandbox/execution/warm.py starts set-ups in that gap).
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Callable, Iterator

log = logging.getLogger(__name__)

TIMED_STAGES = frozenset({"baselines", "calibration", "timing"})
"""A candidate's stages (sandbox/execution/phases.py) whose measurements a spare's device set-up would perturb."""
WARMING_WAIT_S = 30.0
"""Longest a timed phase waits for a step of a spare's device set-up to end before that spare is killed: the longest
step, the context's creation, takes under a second; a step still running after this is stuck, not slow."""


class GateClosed(Exception):
    """The gate is closing (its pool is): no set-up starts."""


class DeviceGate:
    """Keeps a spare's device set-up and a candidate's timed phases apart on one device (module docstring)."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._timed = 0
        self._timed_begun = 0
        self._timed_waiting = 0
        self._warming = False
        self._abort: Callable[[], None] | None = None
        self._closed = False

    @contextlib.contextmanager
    def phase(self, name: str, stages: dict[str, float]) -> Iterator[None]:
        """A candidate's stage: a timed one waits for the step of a spare's set-up that runs to end, then keeps the
        set-up's next steps out until it ends."""
        if name not in TIMED_STAGES:
            yield
            return
        started = time.monotonic()
        with self._cond:
            self._timed_waiting += 1  # no set-up step starts while this waits
            try:
                if not self._cond.wait_for(lambda: not self._warming, timeout=WARMING_WAIT_S):
                    log.warning("a step of a spare's device set-up overran %.0f s beside a timed phase: killed",
                                WARMING_WAIT_S)
                    if self._abort is not None:
                        self._abort()
                    self._cond.wait_for(lambda: not self._warming)  # the set-up thread sees the kill at once
            finally:
                self._timed_waiting -= 1
            self._timed += 1
            self._timed_begun += 1
        stages["device_gate_wait"] = stages.get("device_gate_wait", 0.0) + time.monotonic() - started
        try:
            yield
        finally:
            with self._cond:
                self._timed -= 1
                self._cond.notify_all()

    @contextlib.contextmanager
    def warming(self, abort: Callable[[], None] | None = None) -> Iterator[None]:
        """One step of a spare's device set-up: waits until no timed phase runs or waits and no other step runs, and
        holds the gate until the step ends. `abort` ends the step at once (it kills the spare); a timed phase that has
        waited `WARMING_WAIT_S` for the step calls it. Raises `GateClosed` once the gate is closing."""
        with self._cond:
            self._cond.wait_for(lambda: self._closed or (self._timed == 0 and not self._timed_waiting
                                                         and not self._warming))
            if self._closed:
                raise GateClosed
            self._warming, self._abort = True, abort
        try:
            yield
        finally:
            with self._cond:
                self._warming, self._abort = False, None
                self._cond.notify_all()

    @property
    def busy(self) -> tuple[int, bool]:
        """(timed phases running, a step of a spare's set-up running): for tests and diagnostics."""
        with self._cond:
            return self._timed, self._warming

    @property
    def waiting(self) -> int:
        """Timed phases waiting for a set-up's step to end: for tests and diagnostics."""
        with self._cond:
            return self._timed_waiting

    @property
    def timed_begun(self) -> int:
        """Timed phases begun on this device so far."""
        with self._cond:
            return self._timed_begun

    def close(self) -> None:
        with self._cond:
            self._closed = True
            self._cond.notify_all()
