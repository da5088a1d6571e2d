"""The device gate: keeps a spare's device set-up (sandbox/execution/warm.py) and a candidate's timed phases apart
on one device.

A spare's device set-up (context creation, the tripwires' probe calls, the calibration's empty calls) runs
kernels and allocates device memory; beside a candidate being timed on the same device it would perturb that
candidate's times (time-slicing between contexts, memory traffic). So a set-up waits until no candidate on that
device is in a timed phase (`TIMED_STAGES`), and a timed phase that starts while a set-up runs waits for it to
end (at most `WARMING_WAIT_S`, then the spare is killed and replaced). A timed phase waiting goes first: no new
set-up starts until it has begun and ended, so that set-ups one after another cannot keep a candidate from its
timing. One set-up at a time per device: context creations beside one another only queue in the driver. A wait,
when there is one, is the candidate's device time and is recorded (`device_gate_wait` in its stages).

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
"""Longest a timed phase waits for a spare's device set-up to end before that spare is killed: context
creation and calibration take seconds; a set-up still running after this is stuck, not slow."""


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
        """A candidate's stage: a timed one waits for a spare's set-up to end, then keeps new ones out."""
        if name not in TIMED_STAGES:
            yield
            return
        started = time.monotonic()
        with self._cond:
            self._timed_waiting += 1  # no new set-up starts while this waits
            try:
                if not self._cond.wait_for(lambda: not self._warming, timeout=WARMING_WAIT_S):
                    log.warning("a spare's device set-up overran %.0f s beside a timed phase: killed", WARMING_WAIT_S)
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
    def warming(self) -> Iterator[Callable[[Callable[[], None]], None]]:
        """A spare's device set-up: waits until no timed phase runs; yields a setter for the abort callback."""
        with self._cond:
            self._cond.wait_for(lambda: self._closed or (self._timed == 0 and not self._timed_waiting
                                                         and not self._warming))
            if self._closed:
                raise GateClosed
            self._warming = True

        def set_abort(abort: Callable[[], None]) -> None:
            with self._cond:
                self._abort = abort

        try:
            yield set_abort
        finally:
            with self._cond:
                self._warming, self._abort = False, None
                self._cond.notify_all()

    @property
    def busy(self) -> tuple[int, bool]:
        """(timed phases running, a spare warming): for tests and diagnostics."""
        with self._cond:
            return self._timed, self._warming

    @property
    def waiting(self) -> int:
        """Timed phases waiting for a set-up to end: for tests and diagnostics."""
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
