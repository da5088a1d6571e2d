"""Pre-started judge children: a child's start-up (sandbox, interpreter, torch, device context, clock
calibration) paid ahead of need, so that a candidate holds the device only for its own work.

Measured on an H100 (torch 2.11, bubblewrap): starting a judge child to its `Ready` took 8-11 s of the
12-26 s a candidate held the GPU. None of that depends on the candidate, so a `WarmPool` keeps `spares`
children per device started ahead of time, and `sandbox.execute(..., child=pool.acquire(device, task))`
hands one a candidate.

A spare's life (the device's "starters", one thread per spare, do all but the last two steps):

    spawned: bubblewrap + Python + `import torch` (CPU only)      --Started-->  waiting, the device untouched
    Begin(task) once the device is quiet (see the gate below)     --Ready-->    context, tripwires, clock
    calibrated: the clock's overhead and the empty timed calls, by `Execution.calibrate` itself, as a cold
      start runs them (they are stored and `execute` adopts them)  -->          ready
    acquire: handed to ONE candidate: `execute` copies the build into the spare's own directory (bound at its
      /build since it started, so the child sees it), loads it, judges it, and kills the child at the end.

Isolation stays fresh per candidate: every spare has its own new work directory and sandbox, serves exactly
one candidate and is then killed; nothing of one candidate can reach the next. A spare is never reused,
and one that died (killed, crashed, its wall limit) or is older than `max_age_s` is replaced, never used.

Failure attribution is unchanged: no candidate code runs in a spare until `load`, so a spare that fails
before that is the judge's failure (discarded and replaced here; `system_error` if it happens in `execute`).

The device gate (`DeviceGate`): a spare's device set-up (context creation, the tripwires' probe calls, the
calibration's empty calls) runs kernels and allocates device memory; beside a candidate being timed on the
same device it would perturb that candidate's times (time-slicing between contexts, memory traffic). The
chosen order: a spare's device phase waits until no candidate on that device is in a timed phase
(`TIMED_STAGES`), and a timed phase that starts while a spare's device phase runs waits for it to end (at
most `WARMING_WAIT_S`, then the spare is killed and replaced). So the two never overlap, and the usual wait
is zero: the spare's CPU-only start overlaps the current candidate freely, and its device phase (short next
to the start) fits in the current candidate's load and correctness, or after its timing. A wait, when
there is one, is the candidate's device time and is recorded (`device_gate_wait` in its stages). Why not
"only after the current candidate ends": then every start's device phase would sit between two candidates
with the device idle. On the CPU device the CPU itself is what is timed and a start is all CPU work, so
there a spare starts only while no candidate of its device is in flight (between candidates): no gain in
throughput on the CPU, which exists to test the pipeline, and no candidate's time is perturbed.

Calibrating ahead: the empty calls measure what a round trip costs the child (its CPU time and the parent's
window); measured on a spare, they may run beside the current candidate's untimed stages on the same device.
Only the CPU-time bound (sandbox/execution/plausibility.py) uses them, and a busier device makes them costlier, which
loosens that bound for the next candidate, never tightens it (on a GPU that bound is loose by design; the
events and speed-of-light decide there). `precalibrate=False` runs them after the hand-over instead.

A spare begins for the task most recently asked for on its device (the `Begin` comes as late as possible, so
a task switch before it costs nothing); asked for another task, ready spares are retired and one is
started for the new task, and that wait is reported (`acquire_wait_s` in the verdict's cost).

Each device's spares are started by that device's starter threads, one per spare, so that the CPU-only
starts (2.9-3.5 s on the H100's host, three or six at once, once its modules had bytecode caches: without
them 8-11 s, sandbox/execution/bytecode.py) overlap each other and the device phases follow one another through the
gate: with one starter, a spare came every ~9 s and capped a device near 400 candidates an hour. A starter
lives until `close`: bubblewrap's --die-with-parent fires when the *thread* that started it exits
(sandbox/isolation.py). `close` kills every child the pool started, handed out or not.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import re
import shutil
import tempfile
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import torch
from typing_extensions import Self

from reference import get_task
from sandbox.execution import bytecode
from sandbox import protocol as msg
from sandbox.config import JudgeConfig
from sandbox.environment import describe
from sandbox.execution.phases import READY_TIMEOUT_S, Stage, TimedCall
from sandbox.execution.training import execution_class
from sandbox.supervisor import ChildSession
from sandbox.verdict import Environment

log = logging.getLogger(__name__)
R = TypeVar("R", bound=msg.Reply)

TIMED_STAGES = frozenset({"baselines", "calibration", "timing"})
"""A candidate's stages (sandbox/execution/phases.py) whose measurements a spare's device set-up would perturb."""
WARMING_WAIT_S = 30.0
"""Longest a timed phase waits for a spare's device set-up to end before that spare is killed: context
creation and calibration take seconds; a set-up still running after this is stuck, not slow."""
DEFAULT_MAX_AGE_S = 600.0
"""A spare older than this is recycled: its clocks' calibration and environment (clocks, driver) get stale,
and a long-lived process is a larger target for anything that goes wrong slowly (leaks, a dying device)."""
CHECK_INTERVAL_S = 5.0
"""How often an idle starter looks at its ready spares (dead ones replaced, old ones recycled)."""
FAILURE_BACKOFF_S = (1.0, 5.0, 30.0)
"""Pause after 1, 2, 3+ consecutive failed starts, so that a broken host does not spin."""
GIVE_UP_AFTER = 2
"""`acquire` returns None (the caller starts a child itself, and reports that failure) once this many starts
in a row have failed while it waited."""


class _Closed(Exception):
    """The pool is closing: stop starting."""


class DeviceGate:
    """Keeps a spare's device set-up and a candidate's timed phases apart on one device (module docstring)."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._timed = 0
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
            if not self._cond.wait_for(lambda: not self._warming, timeout=WARMING_WAIT_S):
                log.warning("a spare's device set-up overran %.0f s beside a timed phase: killed", WARMING_WAIT_S)
                if self._abort is not None:
                    self._abort()
                self._cond.wait_for(lambda: not self._warming)  # the starter sees the kill at once
            self._timed += 1
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
            self._cond.wait_for(lambda: self._closed or (self._timed == 0 and not self._warming))
            if self._closed:
                raise _Closed
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

    def close(self) -> None:
        with self._cond:
            self._closed = True
            self._cond.notify_all()


@dataclass(eq=False)
class WarmChild:
    """A started, calibrated child waiting for one candidate of `task_id` on `device`."""

    session: ChildSession
    device: str
    task_id: str
    work_dir: Path
    """Bound at the child's /build since it started; `execute` copies the candidate's build here."""
    gate: DeviceGate
    spawned: float
    host_s: float
    """Spawn to `Started`: bubblewrap, the interpreter, torch imported."""
    gate_wait_s: float
    """Waiting for the device to be quiet before `Begin`."""
    device_s: float
    """`Begin` to `Ready`: the device context, tripwires, the clock."""
    setup_s: dict[str, float]
    """`device_s` by step, as the child measured it (`msg.Ready.setup_s`)."""
    calibration_s: float
    empty_calls: list[TimedCall] | None
    environment: Environment | None
    """Read when the spare became ready (inside the gate: nvidia-smi is not run beside a timed candidate)."""
    ready_at: float
    trace_probe: str = ""
    """The child's kernel-trace probe, from its `Ready` (msg.Ready.trace)."""
    handed_at: float | None = None
    acquire_wait_s: float = 0.0
    """How long the `acquire` that returned this child waited for it (0 when a spare was ready)."""

    def alive(self) -> bool:
        return self.session.process.poll() is None

    def age_s(self) -> float:
        return time.monotonic() - self.spawned

    def hand_over(self, wall_s: float) -> ChildSession:
        """The child is the candidate's from now: its wall-time limit restarts (never raises; a child that died
        meanwhile fails the first request, before the candidate is loaded: the judge's failure)."""
        self.handed_at = time.monotonic()
        self.session.process.restart_clock(wall_s)
        return self.session

    def pre_stages(self) -> dict[str, float]:
        """What this child's start cost before the candidate was handed over (not device time of the candidate)."""
        return {"pre_start": self.host_s + self.device_s, "pre_calibration": self.calibration_s}

    def cost(self) -> dict[str, Any]:
        idle = (self.handed_at or time.monotonic()) - self.ready_at
        return {"host_s": round(self.host_s, 4), "gate_wait_s": round(self.gate_wait_s, 4),
                "device_s": round(self.device_s, 4), "setup_s": {k: round(v, 4) for k, v in self.setup_s.items()},
                "calibration_s": round(self.calibration_s, 4),
                "idle_s": round(idle, 4), "acquire_wait_s": round(self.acquire_wait_s, 4)}

    def discard(self) -> None:
        """Kill the child (it was not used, or must not be) and remove its directory."""
        _kill(self.session)
        shutil.rmtree(self.work_dir, ignore_errors=True)


def _kill(session: ChildSession) -> None:
    session.kill()
    session.close(timeout_s=5.0)


@dataclass
class _Slot:
    """One device: its gate, its ready spares, and what its starters are doing."""

    device: str
    gate: DeviceGate = field(default_factory=DeviceGate)
    ready: list[WarmChild] = field(default_factory=list)
    want_task: str | None = None
    starting: set[ChildSession] = field(default_factory=set)
    """Spares between spawn and ready (killed by `close`)."""
    pending: int = 0
    """Starts under way (counted from the decision to start, before the spawn, so that starters agree)."""
    in_flight: int = 0
    """Children handed out whose session is not closed yet (their candidate is being judged)."""
    failures: int = 0
    last_error: str = ""
    threads: list[threading.Thread] = field(default_factory=list)
    counts: dict[str, int] = field(default_factory=lambda: {"started": 0, "served": 0, "dead": 0, "recycled": 0,
                                                            "retired": 0, "failed": 0})


class WarmPool:
    """`spares` pre-started children per device, each for exactly one candidate (module docstring)."""

    def __init__(self, devices: Iterable[str], config: JudgeConfig | None = None, *, spares: int = 1,
                 max_age_s: float = DEFAULT_MAX_AGE_S, task_id: str | None = None, precalibrate: bool = True) -> None:
        """`task_id`: the task to begin the first spares for (else the first `acquire` names it).
        `precalibrate`: run the calibration on the spare (else `execute` runs it, on the candidate's clock)."""
        self.config = config or JudgeConfig()
        _warn_if_uncached()
        self.spares = max(1, spares)
        self.max_age_s = max_age_s
        self.precalibrate = precalibrate
        self._cond = threading.Condition()
        self._closed = threading.Event()
        self._handed: set[ChildSession] = set()
        """Children handed out and not closed yet: killed at `close` (their candidates are then lost anyway)."""
        self._runs_root = self.config.build_root.parent / "runs"
        self._slots = {d: _Slot(d, want_task=task_id) for d in dict.fromkeys(devices)}
        for slot in self._slots.values():
            # One starter per spare: the spares' CPU-only starts overlap one another; their device phases still
            # take the gate one at a time.
            for i in range(self.spares):
                thread = threading.Thread(target=self._starter, args=(slot,), name=f"warm-{slot.device}-{i}",
                                          daemon=True)
                slot.threads.append(thread)
                thread.start()

    # --- the caller's side --------------------------------------------------------------------------

    def acquire(self, device: str, task_id: str, timeout_s: float = 3 * READY_TIMEOUT_S) -> WarmChild | None:
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

    def _take(self, slot: _Slot, task_id: str) -> WarmChild | None:
        """Under the lock: the first ready spare fit to serve, after retiring those that are not."""
        while slot.ready:
            child = slot.ready.pop(0)
            reason = self._unfit(child, task_id)
            if reason is None:
                slot.counts["served"] += 1
                slot.in_flight += 1
                self._handed.add(child.session)
                child.session.on_close = functools.partial(self._ended, slot, child.session)
                self._cond.notify_all()  # the starter starts the next spare now
                return child
            slot.counts[reason] += 1
            child.discard()
        return None

    def _unfit(self, child: WarmChild, task_id: str | None) -> str | None:
        if not child.alive():
            return "dead"
        if child.age_s() > self.max_age_s:
            return "recycled"
        if task_id is not None and child.task_id != task_id:
            return "retired"
        return None

    def stats(self) -> dict[str, dict[str, Any]]:
        """Per device: spares ready and starting, and how many were started, served, found dead, recycled, retired,
        failed."""
        with self._cond:
            return {d: {"ready": len(s.ready), "starting": s.pending, **s.counts, "last_error": s.last_error}
                    for d, s in self._slots.items()}

    def ready_children(self, device: str) -> list[WarmChild]:
        """The spares ready on `device` now (still the pool's: for inspection, not for use)."""
        with self._cond:
            slot = self._slots.get(device)
            return list(slot.ready) if slot else []

    def gate(self, device: str) -> DeviceGate | None:
        slot = self._slots.get(device)
        return slot.gate if slot else None

    def close(self) -> None:
        """Stop starting, kill every child the pool started (ready, starting, handed out), join the starters."""
        self._closed.set()
        with self._cond:
            self._cond.notify_all()
            starting = [session for s in self._slots.values() for session in s.starting]
        for slot in self._slots.values():
            slot.gate.close()
        for session in starting:
            session.kill()  # unblocks a starter waiting for Started / Ready
        for slot in self._slots.values():
            for thread in slot.threads:
                thread.join(timeout=60)
        with self._cond:
            ready = [c for s in self._slots.values() for c in s.ready]
            for s in self._slots.values():
                s.ready.clear()
            handed = list(self._handed)
        for child in ready:
            child.discard()
        for session in handed:
            # `execute` closes its session itself (the pipes are its own); only the processes die here.
            session.kill()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # --- the starters (one thread per spare and device) ----------------------------------------------------------

    def _starter(self, slot: _Slot) -> None:
        """One of the device's starters (one per spare): keeps `spares` ready or under way."""
        is_cpu = torch.device(slot.device).type == "cpu"
        while not self._closed.is_set():
            with self._cond:
                for child in list(slot.ready):
                    reason = self._unfit(child, slot.want_task)
                    if reason is not None:
                        slot.ready.remove(child)
                        slot.counts[reason] += 1
                        child.discard()
                if len(slot.ready) + slot.pending >= self.spares or (is_cpu and (slot.in_flight or slot.pending)):
                    # Woken by acquire, by a handed-out child's end, and by close; the timeout re-checks ages.
                    self._cond.wait(CHECK_INTERVAL_S)
                    continue
                slot.pending += 1
            try:
                child = self._start_one(slot)
            except _Closed:
                with self._cond:
                    slot.pending -= 1
                return
            except Exception as exc:  # noqa: BLE001 - a spare that fails before any candidate is ours: retry
                with self._cond:
                    slot.pending -= 1
                    if self._closed.is_set():
                        return  # killed by `close`
                    slot.counts["failed"] += 1
                    slot.failures += 1
                    slot.last_error = f"{type(exc).__name__}: {exc}"
                    self._cond.notify_all()
                log.warning("starting a spare on %s failed: %s", slot.device, slot.last_error)
                self._closed.wait(FAILURE_BACKOFF_S[min(slot.failures, len(FAILURE_BACKOFF_S)) - 1])
                continue
            with self._cond:
                slot.pending -= 1  # in the same critical section as the append: no starter sees neither
                if self._closed.is_set():
                    child.discard()
                    return
                slot.failures = 0
                slot.counts["started"] += 1
                slot.ready.append(child)
                self._cond.notify_all()

    def _start_one(self, slot: _Slot) -> WarmChild:
        """Spawn, wait for `Started`, then (device quiet) `Begin`, `Ready`, calibration. Raises on any failure,
        the child killed and its directory removed."""
        device, config = slot.device, self.config
        is_cpu = torch.device(device).type == "cpu"
        self._runs_root.mkdir(parents=True, exist_ok=True)
        work_dir = Path(tempfile.mkdtemp(prefix=f"spare-{re.sub(r'[^A-Za-z0-9]', '', device)}-", dir=self._runs_root))
        session: ChildSession | None = None
        try:
            spawned = time.monotonic()
            # Its wall limit covers its idle life; `hand_over` restarts it for the candidate.
            session = ChildSession("execute", "", device, work_dir, config, gpu=not is_cpu, pre_started=True,
                                   context_at_start=config.spare_context_at_start,
                                   wall_s=self.max_age_s + 3 * READY_TIMEOUT_S)
            with self._cond:
                slot.starting.add(session)
            _expect(session, msg.Started, READY_TIMEOUT_S)
            host_s = time.monotonic() - spawned
            task_id = self._wait_for_task(slot)
            gate_started = time.monotonic()
            with slot.gate.warming() as set_abort:  # no candidate is being timed on this device until the end
                set_abort(session.kill)
                gate_wait_s = time.monotonic() - gate_started
                began = time.monotonic()
                session.send(msg.Begin(task=task_id).model_dump())
                ready = _expect(session, msg.Ready, READY_TIMEOUT_S)
                device_s = time.monotonic() - began
                empty_calls, calibration_s = (self._calibrate(session, task_id, device) if self.precalibrate
                                              else (None, 0.0))
                environment = describe(device, session.mechanism)
            with self._cond:
                slot.starting.discard(session)
            return WarmChild(session=session, device=device, task_id=task_id, work_dir=work_dir, gate=slot.gate,
                             spawned=spawned, host_s=host_s, gate_wait_s=gate_wait_s, device_s=device_s,
                             setup_s=dict(ready.setup_s),
                             calibration_s=calibration_s, empty_calls=empty_calls, environment=environment,
                             ready_at=time.monotonic(), trace_probe=ready.trace)
        except BaseException:
            if session is not None:
                with self._cond:
                    slot.starting.discard(session)
                _kill(session)
            shutil.rmtree(work_dir, ignore_errors=True)
            raise

    def _wait_for_task(self, slot: _Slot) -> str:
        """The task to begin for: the one last asked for on this device (bound as late as possible)."""
        with self._cond:
            self._cond.wait_for(lambda: self._closed.is_set() or slot.want_task is not None)
            if self._closed.is_set():
                raise _Closed
            assert slot.want_task is not None
            return slot.want_task

    def _calibrate(self, session: ChildSession, task_id: str, device: str) -> tuple[list[TimedCall] | None, float]:
        """`Execution.calibrate` on this child, exactly as a cold `execute` runs it; its results are adopted."""
        task = get_task(task_id)
        shape = task.official_shape if torch.device(device).type == "cuda" else task.cpu_shape
        run = execution_class(task)(task, device, self.config, shape, {})
        run.session = session
        with run.stage(Stage.CALIBRATION):
            run.calibrate()
        return list(run.empty_calls), run.stages["calibration"]

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


def _expect(session: ChildSession, model: type[R], timeout_s: float) -> R:
    """The next reply must be an ok `model` (a spare runs only our code: anything else is a broken start)."""
    reply = session.receive(timeout_s)
    parsed = msg.parse_reply(reply.header, model)
    if not isinstance(parsed, model) or not parsed.ok:
        raise RuntimeError(f"the spare answered {reply.header.get('op')!r} (ok={reply.header.get('ok')}) instead of "
                           f"{msg.op_of(model)!r}: {(parsed.error.message if parsed.error else '')[:500]}")
    return parsed
