"""The device gate: keeps a spare's device set-up (sandbox/execution/warm.py) and a candidate's stages apart on one
device, as far as each needs.

A spare's device set-up (context creation, the tripwires' probe calls, the clock's calibration, the calibration's
empty batches, the environment's reading) runs kernels and allocates device memory; beside a candidate on the same
device the two perturb each other (time-slicing between contexts, memory traffic). So the set-up runs as a sequence
of short steps (`warming`), each holding the gate on its own, of two kinds:

- calibrating steps (the clocks' calibration and each empty batch: `warming(calibrating=True)`) measure what a
  round trip of the child costs; the bounds of sandbox/execution/plausibility.py subtract those figures from every
  later candidate's (the CPU-time floor, the wall bound's empty window, the span charge's reference). One measured
  beside another candidate's work reads long and loosens those bounds for the candidate that gets the spare. So a
  calibrating step runs only while the device is quiet: no candidate on that device is in any stage (`phase`: load,
  correctness and extra shapes as well as the timed ones) or waiting to begin one. It waits for such a gap.
- the other steps (the device's start in the child, the environment's reading) feed no bound: they wait only until
  no candidate is in a timed phase (`TIMED_STAGES`) or waiting for one, and may run beside untimed stages.

A candidate's stage that begins while a step runs that it must not run beside (a timed phase: any step; an untimed
stage: a calibrating one) waits for that step alone to end (at most `WARMING_WAIT_S`, then the spare is killed and
replaced). Between its steps the set-up gives the gate back, so a stage that asked meanwhile goes first and the
set-up resumes after it: a stage waits for at most one step (the longest is the child's own start of the device,
which cannot be split and which only timed phases wait for; a calibrating step is one empty batch), never for a whole
set-up, and set-ups one after another cannot keep a candidate from its stages. One step at a time per device:
context creations beside one another only queue in the driver. A wait, when there is one, is the candidate's device
time and is recorded (`device_gate_wait` in its stages).

What this leaves: a calibration runs in the gaps between a candidate's stages and between candidates (the worker
storing a verdict, `acquire`), so a spare is ready later than when its calibration could overlap the previous
candidate's trials; a candidate that finds none ready waits in `acquire` (`acquire_wait_s`), not in its hold. The
gate sees stages, not the device: device work a candidate's child left running past its last reply of a stage is not
kept apart from a calibrating step that starts before the next stage (the child's own replies synchronise the device
where they carry results; a hostile child's side stream may not have ended).

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
"""A candidate's stages (sandbox/execution/phases.py) whose measurements any step of a spare's device set-up would
perturb. Every other stage keeps out only the calibrating steps (module docstring)."""
WARMING_WAIT_S = 30.0
"""Longest a candidate's stage waits for a step of a spare's device set-up to end before that spare is killed: the
longest step, the context's creation, takes under a second; a step still running after this is stuck, not slow."""


class GateClosed(Exception):
    """The gate is closing (its pool is): no set-up starts."""


class DeviceGate:
    """Keeps a spare's device set-up and a candidate's stages apart on one device (module docstring)."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._timed = 0
        self._stages = 0
        """Candidate stages running, timed or not."""
        self._timed_begun = 0
        self._timed_waiting = 0
        self._stages_waiting = 0
        self._steps_waiting = 0
        self._warming = False
        self._calibrating = False
        """The step running is a calibrating one."""
        self._abort: Callable[[], None] | None = None
        self._closed = False

    @contextlib.contextmanager
    def phase(self, name: str, stages: dict[str, float]) -> Iterator[None]:
        """A candidate's stage: waits for the step of a spare's set-up that runs, where it must not run beside it (a
        timed stage: any step; another: a calibrating step), then keeps those steps out until it ends."""
        timed = name in TIMED_STAGES
        started = time.monotonic()
        with self._cond:
            self._stages_waiting += 1  # no calibrating step starts while this waits
            self._timed_waiting += timed  # and no step at all for a timed one
            try:
                if not self._cond.wait_for(lambda: not self._in_the_way(timed), timeout=WARMING_WAIT_S):
                    log.warning("a step of a spare's device set-up overran %.0f s beside a candidate's %s: killed",
                                WARMING_WAIT_S, name)
                    if self._abort is not None:
                        self._abort()
                    self._cond.wait_for(lambda: not self._in_the_way(timed))  # the set-up thread sees the kill at once
            finally:
                self._stages_waiting -= 1
                self._timed_waiting -= timed
            self._stages += 1
            self._timed += timed
            self._timed_begun += timed
        stages["device_gate_wait"] = stages.get("device_gate_wait", 0.0) + time.monotonic() - started
        try:
            yield
        finally:
            with self._cond:
                self._stages -= 1
                self._timed -= timed
                self._cond.notify_all()

    def _in_the_way(self, timed: bool) -> bool:
        """Under the lock: whether the step running keeps a stage (`timed` or not) waiting."""
        return self._warming and (timed or self._calibrating)

    @contextlib.contextmanager
    def warming(self, abort: Callable[[], None] | None = None, *, calibrating: bool = False) -> Iterator[None]:
        """One step of a spare's device set-up: waits until no other step runs and, for a calibrating step, no
        candidate's stage runs or waits, for another step no timed phase; holds the gate until the step ends.
        `abort` ends the step at once (it kills the spare); a stage that has waited `WARMING_WAIT_S` for the step
        calls it. Raises `GateClosed` once the gate is closing."""
        with self._cond:
            self._steps_waiting += 1
            try:
                self._cond.wait_for(lambda: self._closed or (not self._warming and (
                    self._stages == 0 and not self._stages_waiting if calibrating
                    else self._timed == 0 and not self._timed_waiting)))
            finally:
                self._steps_waiting -= 1
            if self._closed:
                raise GateClosed
            self._warming, self._calibrating, self._abort = True, calibrating, abort
        try:
            yield
        finally:
            with self._cond:
                self._warming, self._calibrating, self._abort = False, False, None
                self._cond.notify_all()

    @property
    def busy(self) -> tuple[int, bool]:
        """(timed phases running, a step of a spare's set-up running): for tests and diagnostics."""
        with self._cond:
            return self._timed, self._warming

    @property
    def stages(self) -> int:
        """Candidate stages running, timed or not: for tests and diagnostics."""
        with self._cond:
            return self._stages

    @property
    def waiting(self) -> int:
        """Timed phases waiting for a set-up's step to end: for tests and diagnostics."""
        with self._cond:
            return self._timed_waiting

    @property
    def steps_waiting(self) -> int:
        """Steps of a spare's set-up waiting for their turn: for tests and diagnostics."""
        with self._cond:
            return self._steps_waiting

    @property
    def timed_begun(self) -> int:
        """Timed phases begun on this device so far."""
        with self._cond:
            return self._timed_begun

    def close(self) -> None:
        with self._cond:
            self._closed = True
            self._cond.notify_all()


class SetUpSteps:
    """A spare's set-up as steps through its device's gate (`DeviceGate.warming`), and the seconds it
    waited there: before its first step, and between steps while candidates' stages went first."""

    def __init__(self, gate: DeviceGate, abort: Callable[[], None]) -> None:
        self.gate, self.abort = gate, abort
        self.waited_s = 0.0

    @contextlib.contextmanager
    def step(self, *, calibrating: bool = False) -> Iterator[None]:
        """One step: waits for the gate (`DeviceGate.warming`; `calibrating`: a step whose figures feed a bound),
        holds it while the step runs."""
        asked = time.monotonic()
        with self.gate.warming(self.abort, calibrating=calibrating):
            self.waited_s += time.monotonic() - asked
            yield
