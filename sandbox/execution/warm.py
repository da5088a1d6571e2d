"""Pre-started judge children: a child's start-up (sandbox, interpreter, torch, device context, clock
calibration) paid ahead of need, so that a candidate holds the device only for its own work.

Measured on an H100 (torch 2.11, bubblewrap): starting a judge child to its `Ready` took 8-11 s of the
12-26 s a candidate held the GPU. None of that depends on the candidate, so a `WarmPool` keeps children per
device started ahead of time, and `sandbox.execute(..., child=pool.acquire(device, task))` hands one a candidate.

A spare's life, in two stocks per device:

    spawned: bubblewrap + Python + `import torch` (CPU only), holding one of the host's start slots
      (sandbox/execution/start_slots.py: a cap on the starts at once across the host's workers)
                                                                 --Started-->  standby: no task, device untouched
    set up: Begin(task) once the device is quiet (sandbox/execution/device_gate.py)  --Ready-->  context, tripwires,
      clock; calibrated: the clock's overhead and the empty timed calls, by `Execution.calibrate` itself, as a
      cold start runs them (they are stored and `execute` adopts them)                           -->  ready
      Each request of the set-up to the child is a step through the device's gate: a candidate's stage that asks
      meanwhile waits for the step running (where the two must not overlap), not for the set-up, and the set-up
      resumes after that stage. The calibration's steps run only while no candidate of the device is in any stage.
    acquire: handed to ONE candidate: `execute` copies the build into the spare's own directory (bound at its
      /build since it started, so the child sees it), loads it, judges it, and kills the child at the end.

`spares` ready children and `standby` host-started ones are kept per device. A ready spare costs device memory
(its context) and its set-up is device work; a standby one costs host memory only. Why both: the CPU-only start
(~3 s on an H100 host with bytecode caches, sandbox/execution/bytecode.py; 8-11 s without) is what cannot keep up
when short candidates (a rejected one holds the device ~0.5 s) come one after another; from standby a
replacement is only its set-up away (~0.5 s). With only ready spares (`standby=0`), every replacement waited for
a whole start, and on the two-GPU host the GPUs waited for spares (docs/results/fleet-h100x2-2026-11-26.md).

Threads, per device: `spares + standby` spawners (each waits for a start slot, spawns, and puts its child in
standby; bubblewrap's --die-with-parent fires when the *thread* that started a child exits, so a spawner lives
until `close`, sandbox/isolation.py), and one set-up thread, which takes the oldest standby child through the
gate: one set-up at a time per device.

When a set-up starts (the idle gaps): at once when no ready spare is left, or when no candidate of the device is
in flight; otherwise only while the candidate handed out last is still in its untimed start (load,
correctness: it has begun no timed phase, `DeviceGate.timed_begun`), so that the child's start of the device runs
beside those rather than at a random moment. The calibration that follows waits for a gap with no candidate's stage
on the device (between two stages, or between candidates); a stage that begins while one of its steps runs waits for
that step, and the rest of the set-up waits for the stage to end (sandbox/execution/device_gate.py). On the CPU
device the CPU itself is what is timed and a start is all CPU work, so there (`between_candidates`) a spare is
spawned and set up only while no candidate of its device is in flight: no gain in throughput on the CPU, which
exists to test the pipeline, and no candidate's time is perturbed.

Isolation stays fresh per candidate: every spare has its own new work directory and sandbox, serves exactly
one candidate and is then killed; nothing of one candidate can reach the next. A spare is never reused,
and one that died (killed, crashed, its wall limit) or is older than `max_age_s` is replaced, never used.

Failure attribution is unchanged: no candidate code runs in a spare until `load`, so a spare that fails
before that is the judge's failure (discarded and replaced here; `system_error` if it happens in `execute`).

Calibrating ahead: the clocks' calibration and the empty calls measure what a round trip costs the child; the bounds
of sandbox/execution/plausibility.py subtract them, so each passes the gate as a calibrating step, run only while no
candidate of the device is in any stage (sandbox/execution/device_gate.py; docs/threat-model.md, "What a spare's
calibration measures"). `precalibrate=False` runs them after the hand-over instead. A candidate on a precalibrated
spare does not take the gate for its calibration stage: it only adopts the spare's figures.

A spare is set up for the task most recently asked for on its device (as late as possible: a standby child has
no task, so a task switch costs a set-up, not a start). Ready spares of another task are kept while there is
room, so that tasks asked for in turn are each served from stock; when the task asked for has no ready spare and
the ready places are full, the oldest spare of another task is retired to make room, and the wait is reported
(`acquire_wait_s` in the verdict's cost). `close` kills every child the pool started, handed out or not.
"""

from __future__ import annotations

import functools
import logging
import re
import shutil
import tempfile
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import torch
from typing_extensions import Self

from reference import TaskId, get_task
from sandbox import protocol as msg
from sandbox.config import JudgeConfig
from sandbox.environment import describe
from sandbox.execution import bytecode
from sandbox.execution.device_gate import TIMED_STAGES, WARMING_WAIT_S, DeviceGate, GateClosed, SetUpSteps
from sandbox.execution.records import READY_TIMEOUT_S, Calibration, Stage
from sandbox.execution.start_slots import HostStartSlots, SlotWaitAborted
from sandbox.execution.spares import Interval, Standby, WarmChild, _kill, _Slot, expect_reply
from sandbox.execution.training import execution_class
from sandbox.supervisor import ChildSession

__all__ = ["TIMED_STAGES", "WARMING_WAIT_S", "DeviceGate", "WarmChild", "WarmPool"]

log = logging.getLogger(__name__)

DEFAULT_MAX_AGE_S = 600.0
"""A spare older than this is recycled: its clocks' calibration and environment (clocks, driver) get stale,
and a long-lived process is a larger target for anything that goes wrong slowly (leaks, a dying device)."""
CHECK_INTERVAL_S = 5.0
"""How often an idle spawner or set-up thread looks at its spares (dead ones replaced, old ones recycled)."""
FAILURE_BACKOFF_S = (1.0, 5.0, 30.0)
"""Pause after 1, 2, 3+ consecutive failed starts, so that a broken host does not spin."""
GIVE_UP_AFTER = 2
"""`acquire` returns None (the caller starts a child itself, and reports that failure) once this many starts
in a row have failed while it waited."""
HISTORY = 4096
"""Start and set-up intervals kept for `timeline` (tests, benches): a few hours of a busy device."""


class _Closed(Exception):
    """The pool is closing: stop starting."""


class WarmPool:
    """`spares` ready and `standby` host-started children per device, each for exactly one candidate (module
    docstring)."""

    def __init__(self, devices: Iterable[str], config: JudgeConfig | None = None, *, spares: int = 1,
                 standby: int = 0, max_age_s: float = DEFAULT_MAX_AGE_S, task_id: TaskId | None = None,
                 precalibrate: bool = True, between_candidates: bool | None = None,
                 start_slots: HostStartSlots | None = None) -> None:
        """`task_id`: the task to set the first spares up for (else the first `acquire` names it).
        `precalibrate`: run the calibration on the spare (else `execute` runs it, on the candidate's clock).
        `between_candidates`: spawn and set up a spare only while no candidate of its device is in flight; None:
        on CPU devices only (module docstring). False on the CPU runs the GPU's scheduling there (tests, benches).
        `start_slots`: the host's start slots (default: `config.spare_start_slots` of them under cache_root)."""
        self.config = config or JudgeConfig()
        _warn_if_uncached()
        self.spares = max(1, spares)
        self.standby = max(0, standby)
        self.max_age_s = max_age_s
        self.precalibrate = precalibrate
        self.between_candidates = between_candidates
        self.start_slots = start_slots or HostStartSlots(self.config.cache_root / "spare-start-slots",
                                                         self.config.spare_start_slots)
        self._cond = threading.Condition()
        self._closed = threading.Event()
        self._handed: set[ChildSession] = set()
        """Children handed out and not closed yet: killed at `close` (their candidates are then lost anyway)."""
        self._history: deque[Interval] = deque(maxlen=HISTORY)
        self._runs_root = self.config.build_root.parent / "runs"
        self._slots = {d: _Slot(d, want_task=task_id) for d in dict.fromkeys(devices)}
        for slot in self._slots.values():
            # One spawner per child kept: spawns overlap one another as far as the host's start slots allow.
            workers = [(self._spawner, f"spawn-{i}") for i in range(self.spares + self.standby)]
            for target, name in [*workers, (self._setter, "set-up")]:
                thread = threading.Thread(target=target, args=(slot,), name=f"warm-{slot.device}-{name}", daemon=True)
                slot.threads.append(thread)
                thread.start()

    # --- the caller's side --------------------------------------------------------------------------

    def acquire(self, device: str, task_id: TaskId, timeout_s: float = 3 * READY_TIMEOUT_S) -> WarmChild | None:
        """A ready child for `task_id` on `device`, now or when one is ready; the caller owns it (pass it to
        `execute`, or `discard` it). None when the pool is closed, the device is not the pool's, starts keep
        failing, or none is ready within `timeout_s`: the caller then starts a child itself."""
        slot = self._slots.get(device)
        if slot is None:
            return None
        asked = time.monotonic()
        deadline = asked + timeout_s
        with self._cond:
            slot.want_task = task_id
            failures_before = slot.counts["failed"]
            self._cond.notify_all()
            while not self._closed.is_set():
                child = self._take(slot, task_id)
                if child is not None:
                    child.acquire_wait_s = time.monotonic() - asked
                    return child
                if slot.counts["failed"] - failures_before >= GIVE_UP_AFTER:
                    log.warning("no spare on %s: %d starts failed in a row (%s)", device, GIVE_UP_AFTER,
                                slot.last_error)
                    return None
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return None
                self._cond.wait(min(remaining, CHECK_INTERVAL_S))
        return None

    def _take(self, slot: _Slot, task_id: TaskId) -> WarmChild | None:
        """Under the lock: the oldest ready spare of `task_id` fit to serve (those unfit are discarded first)."""
        self._tidy(slot)
        for child in slot.ready:
            if child.task_id == task_id:
                slot.ready.remove(child)
                slot.counts["served"] += 1
                slot.in_flight += 1
                slot.handed_mark = slot.gate.timed_begun
                self._handed.add(child.session)
                child.session.on_close = functools.partial(self._ended, slot, child.session)
                self._cond.notify_all()  # the set-up thread takes the next from standby, a spawner refills it
                return child
        return None

    def _unfit(self, child: WarmChild | Standby) -> str | None:
        if not child.alive():
            return "dead"
        if child.age_s() > self.max_age_s:
            return "recycled"
        return None

    def stats(self) -> dict[str, dict[str, Any]]:
        """Per device: spares ready, in standby and starting (spawning or being set up), and how many were spawned,
        set up ("started"), served, found dead, recycled, retired, failed."""
        with self._cond:
            return self._stats()

    def _stats(self) -> dict[str, dict[str, Any]]:
        return {d: {"ready": len(s.ready), "standby": len(s.standby), "starting": s.spawning + s.warming,
                    **s.counts, "last_error": s.last_error} for d, s in self._slots.items()}

    def wait_until(self, predicate: Callable[[dict[str, dict[str, Any]]], bool], timeout_s: float) -> bool:
        """Block until `predicate(stats())` holds (checked at every change of the pool) or `timeout_s` passes."""
        with self._cond:
            return self._cond.wait_for(lambda: predicate(self._stats()), timeout=timeout_s)

    def timeline(self) -> list[Interval]:
        """The spawns and set-ups of the pool's life (the last `HISTORY`), in the order they ended."""
        with self._cond:
            return list(self._history)

    def ready_children(self, device: str) -> list[WarmChild]:
        """The spares ready on `device` now (still the pool's: for inspection, not for use)."""
        with self._cond:
            slot = self._slots.get(device)
            return list(slot.ready) if slot else []

    def standby_children(self, device: str) -> list[Standby]:
        """The standby children of `device` now (still the pool's: for inspection, not for use)."""
        with self._cond:
            slot = self._slots.get(device)
            return list(slot.standby) if slot else []

    def gate(self, device: str) -> DeviceGate | None:
        slot = self._slots.get(device)
        return slot.gate if slot else None

    def close(self) -> None:
        """Stop starting, kill every child the pool started (ready, standby, starting, handed out), join the
        threads."""
        self._closed.set()
        with self._cond:
            self._cond.notify_all()
            starting = [session for s in self._slots.values() for session in s.starting]
        self.start_slots.wake()
        for slot in self._slots.values():
            slot.gate.close()
        for session in starting:
            session.kill()  # unblocks a thread waiting for Started / Ready
        for slot in self._slots.values():
            for thread in slot.threads:
                thread.join(timeout=60)
        with self._cond:
            left: list[WarmChild | Standby] = [c for s in self._slots.values() for c in (*s.ready, *s.standby)]
            for s in self._slots.values():
                s.ready.clear()
                s.standby.clear()
            handed = list(self._handed)
        for child in left:
            child.discard()
        for session in handed:
            # `execute` closes its session itself (the pipes are its own); only the processes die here.
            session.kill()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # --- the pool's threads (per device: spawners and one set-up thread) ----------------------------------------

    def _quiet(self, slot: _Slot) -> bool:
        """Spares of this device start only between candidates (module docstring)."""
        if self.between_candidates is None:
            return torch.device(slot.device).type == "cpu"
        return self.between_candidates

    def _tidy(self, slot: _Slot) -> None:
        """Under the lock: discard the ready and standby children that must not be used (dead, old), and retire a
        ready spare of another task when the task asked for has none and no place is left to set one up."""
        changed = False
        for stock in (slot.ready, slot.standby):
            for child in list(stock):
                reason = self._unfit(child)
                if reason is not None:
                    stock.remove(child)  # type: ignore[arg-type]
                    slot.starting.discard(child.session)
                    slot.counts[reason] += 1
                    child.discard()
                    changed = True
        wanted = slot.want_task
        if (wanted is not None and not slot.warming and len(slot.ready) >= self.spares
                and not any(c.task_id == wanted for c in slot.ready)):
            # Ready spares of the other tasks are kept while there is room (tasks that alternate are served
            # without a set-up each); full, the oldest of them makes room for the task asked for. Not while a
            # set-up runs: it is for the task asked for, or it ends soon and this is decided again.
            others = [c for c in slot.ready if c.task_id != wanted]
            if others:
                slot.ready.remove(others[0])
                slot.counts["retired"] += 1
                others[0].discard()
                changed = True
        if changed:
            self._cond.notify_all()

    def _may_spawn(self, slot: _Slot) -> bool:
        kept = len(slot.ready) + slot.warming + len(slot.standby) + slot.spawning
        if kept >= self.spares + self.standby:
            return False
        return not (self._quiet(slot) and (slot.in_flight or slot.spawning or slot.warming))

    def _may_set_up(self, slot: _Slot) -> bool:
        """A set-up now? Only for a task, from standby, while ready spares are short, and in an idle gap."""
        if slot.want_task is None or not slot.standby or len(slot.ready) + slot.warming >= self.spares:
            return False
        if self._quiet(slot):
            return not slot.in_flight
        short = not any(c.task_id == slot.want_task for c in slot.ready)  # the next candidate would wait for it
        return short or not slot.in_flight or slot.gate.timed_begun == slot.handed_mark

    def _spawner(self, slot: _Slot) -> None:
        """One of the device's spawners: keeps the device's stocks full, one child at a time, into standby."""
        while not self._closed.is_set():
            with self._cond:
                self._tidy(slot)
                if not self._may_spawn(slot):
                    # Woken by acquire, a hand-over, a candidate's end, a set-up, close; the timeout re-checks ages.
                    self._cond.wait(CHECK_INTERVAL_S)
                    continue
                slot.spawning += 1
            try:
                spare = self._spawn(slot)
            except (_Closed, SlotWaitAborted):
                with self._cond:
                    slot.spawning -= 1
                return
            except Exception as exc:  # noqa: BLE001 - a spare that fails before any candidate is ours: retry
                with self._cond:
                    slot.spawning -= 1
                if not self._failed(slot, exc):
                    return
                continue
            with self._cond:
                slot.spawning -= 1  # in the same critical section as the append: no spawner sees neither
                if self._closed.is_set():
                    slot.starting.discard(spare.session)
                    spare.discard()
                    return
                slot.counts["spawned"] += 1
                slot.standby.append(spare)
                self._cond.notify_all()

    def _setter(self, slot: _Slot) -> None:
        """The device's set-up thread: takes standby children through the gate to ready, one at a time."""
        while not self._closed.is_set():
            with self._cond:
                self._tidy(slot)
                if not self._may_set_up(slot):
                    self._cond.wait(CHECK_INTERVAL_S)
                    continue
                spare = slot.standby.pop(0)  # the oldest first: none ages out in standby while newer ones serve
                task_id = slot.want_task
                slot.warming += 1
            assert task_id is not None
            try:
                child = self._set_up(slot, spare, task_id)
            except GateClosed:
                with self._cond:
                    slot.warming -= 1
                return
            except Exception as exc:  # noqa: BLE001 - a spare that fails before any candidate is ours: retry
                with self._cond:
                    slot.warming -= 1
                if not self._failed(slot, exc):
                    return
                continue
            with self._cond:
                slot.warming -= 1
                if self._closed.is_set():
                    child.discard()
                    return
                slot.failures = 0
                slot.counts["started"] += 1
                slot.ready.append(child)
                self._cond.notify_all()

    def _failed(self, slot: _Slot, exc: Exception) -> bool:
        """Count a failed spawn or set-up and back off; False when the pool is closing (the failure was its kill)."""
        with self._cond:
            if self._closed.is_set():
                return False
            slot.counts["failed"] += 1
            slot.failures += 1
            slot.last_error = f"{type(exc).__name__}: {exc}"
            failures = slot.failures
            self._cond.notify_all()
        log.warning("starting a spare on %s failed: %s", slot.device, slot.last_error)
        self._closed.wait(FAILURE_BACKOFF_S[min(failures, len(FAILURE_BACKOFF_S)) - 1])
        return True

    def _spawn(self, slot: _Slot) -> Standby:
        """Hold a host start slot from the spawn to `Started`. Raises on any failure, the child killed and its
        directory removed."""
        device, config = slot.device, self.config
        is_cpu = torch.device(device).type == "cpu"
        self._runs_root.mkdir(parents=True, exist_ok=True)
        work_dir = Path(tempfile.mkdtemp(prefix=f"spare-{re.sub(r'[^A-Za-z0-9]', '', device)}-", dir=self._runs_root))
        session: ChildSession | None = None
        try:
            with self.start_slots.hold(abort=self._closed.is_set) as slot_wait_s:
                spawned = time.monotonic()
                # Its wall limit covers its idle life; `hand_over` restarts it for the candidate.
                session = ChildSession("execute", None, device, work_dir, config, gpu=not is_cpu, pre_started=True,
                                       context_at_start=config.spare_context_at_start,
                                       wall_s=self.max_age_s + 3 * READY_TIMEOUT_S)
                with self._cond:
                    if self._closed.is_set():
                        raise _Closed
                    slot.starting.add(session)
                expect_reply(session, msg.Started, READY_TIMEOUT_S)
                started_at = time.monotonic()
            with self._cond:
                self._history.append(Interval(device, "spawn", spawned, started_at))
            return Standby(session=session, work_dir=work_dir, spawned=spawned, started_at=started_at,
                           slot_wait_s=slot_wait_s)
        except BaseException:
            if session is not None:
                with self._cond:
                    slot.starting.discard(session)
                _kill(session)
            shutil.rmtree(work_dir, ignore_errors=True)
            raise

    def _set_up(self, slot: _Slot, spare: Standby, task_id: TaskId) -> WarmChild:
        """`Begin` and `Ready`, calibration, the environment, each step through the device's gate (a candidate's stage
        that asks meanwhile goes between two steps; the calibration's steps wait for a device with no stage on it).
        Raises on any failure, the child killed and its directory removed."""
        session, device = spare.session, slot.device
        steps = SetUpSteps(slot.gate, session.kill)
        try:
            picked = time.monotonic()
            with steps.step():  # the child's own start of the device: one request, not split
                began = time.monotonic()
                session.send(msg.Begin(task=task_id).model_dump())
                ready = expect_reply(session, msg.Ready, READY_TIMEOUT_S)
                device_s = time.monotonic() - began
            calibration, calibration_s = (self._calibrate(session, task_id, device, steps) if self.precalibrate
                                          else (None, 0.0))
            with steps.step():  # nvidia-smi on a GPU: not beside a timed candidate
                described = time.monotonic()
                environment = describe(device, session.mechanism)
                ended = time.monotonic()
            with self._cond:
                slot.starting.discard(session)
                self._history.append(Interval(device, "set_up", began, ended))
            return WarmChild(session=session, device=device, task_id=task_id, work_dir=spare.work_dir,
                             gate=slot.gate, spawned=spare.spawned, host_s=spare.started_at - spare.spawned,
                             gate_wait_s=began - picked, device_s=device_s, setup_s=dict(ready.setup_s),
                             calibration_s=calibration_s, calibration=calibration, environment=environment,
                             ready_at=ended, slot_wait_s=spare.slot_wait_s, standby_s=picked - spare.started_at,
                             environment_s=ended - described, began_at=began, trace_probe=ready.trace,
                             yielded_s=steps.waited_s - (began - picked))
        except BaseException:
            with self._cond:
                slot.starting.discard(session)
            spare.discard()
            raise

    def _calibrate(self, session: ChildSession, task_id: TaskId, device: str,
                   steps: SetUpSteps) -> tuple[Calibration | None, float]:
        """`Execution.calibrate` on this child, exactly as a cold `execute` runs it, each of its requests a calibrating
        step through the gate (its figures feed the bounds: none runs beside a candidate's stage); its results are
        adopted. The seconds it took, less its waits for the gate."""
        task = get_task(task_id)
        shape = task.official_shape if torch.device(device).type == "cuda" else task.cpu_shape
        run = execution_class(task)(task, device, self.config, shape, {})
        run.session = session
        waited = steps.waited_s
        with run.stage(Stage.CALIBRATION):
            run.calibrate(functools.partial(steps.step, calibrating=True))
        return run.calibration, run.stages["calibration"] - (steps.waited_s - waited)

    def _ended(self, slot: _Slot, session: ChildSession) -> None:
        """A handed-out child was closed: its candidate is over."""
        with self._cond:
            if session in self._handed:
                self._handed.discard(session)
                slot.in_flight -= 1
            self._cond.notify_all()


@functools.cache
def _warn_if_uncached() -> None:
    """Once per process: a deployment without bytecode caches makes every spare's start ~2.5x slower."""
    missing = bytecode.missing_caches()
    if missing:
        log.warning("%s", bytecode.advice(missing))
