"""The stocks of pre-started children (sandbox/execution/warm.py's `WarmPool` keeps them): a spawned child in standby
(`Standby`), a set-up, calibrated child waiting for one candidate (`WarmChild`), a device's slot with its stocks and
threads' counters (`_Slot`), a row of the pool's timeline (`Interval`), and the check of a spare's replies
(`expect_reply`).
"""

from __future__ import annotations

import contextlib
import shutil
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ContextManager, TypeVar


from reference import TaskId
from sandbox import protocol as msg
from sandbox.execution.device_gate import DeviceGate
from sandbox.execution.records import Calibration, Stage
from sandbox.supervisor import ChildSession
from sandbox.verdict import Environment

R = TypeVar("R", bound=msg.Reply)


@dataclass(eq=False)
class Standby:
    """A spawned child at `Started`: interpreter and torch up, no task yet, the device untouched."""

    session: ChildSession
    work_dir: Path
    spawned: float
    started_at: float
    slot_wait_s: float
    """Waiting for a host start slot before the spawn (sandbox/execution/start_slots.py)."""

    def alive(self) -> bool:
        return self.session.process.poll() is None

    def age_s(self) -> float:
        return time.monotonic() - self.spawned

    def discard(self) -> None:
        _kill(self.session)
        shutil.rmtree(self.work_dir, ignore_errors=True)


@dataclass(eq=False)
class WarmChild:
    """A started, calibrated child waiting for one candidate of `task_id` on `device`."""

    session: ChildSession
    device: str
    task_id: TaskId
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
    calibration: Calibration | None
    """`Execution.calibrate`'s figures, measured on this child before any candidate existed (None: not yet run)."""
    environment: Environment | None
    """Read when the spare became ready (inside the gate: nvidia-smi is not run beside a timed candidate)."""
    ready_at: float
    slot_wait_s: float = 0.0
    """Waiting for a host start slot before the spawn."""
    standby_s: float = 0.0
    """`Started` to the start of its set-up: in standby, then waiting for an idle gap."""
    environment_s: float = 0.0
    """Reading the environment (nvidia-smi on a GPU), inside the gate."""
    began_at: float = 0.0
    """When its set-up began (the gate passed, `Begin` sent)."""
    trace_probe: str = ""
    """The child's kernel-trace probe, from its `Ready` (msg.Ready.trace)."""
    handed_at: float | None = None
    acquire_wait_s: float = 0.0
    """How long the `acquire` that returned this child waited for it (0 when a spare was ready)."""
    yielded_s: float = 0.0
    """Its set-up's waits at the gate after its first step: candidates' stages that went between its steps (its
    calibration waits for a device with no candidate's stage on it)."""

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

    def phase(self, stage: str, stages: dict[str, float]) -> ContextManager[None]:
        """The gate's phase for the candidate's `stage`; none for a calibration the spare ran already (the
        candidate adopts its figures and touches no device, so it need not wait for another spare's set-up)."""
        if stage == Stage.CALIBRATION.value and self.calibration is not None:
            return contextlib.nullcontext()
        return self.gate.phase(stage, stages)

    def pre_stages(self) -> dict[str, float]:
        """What this child's start cost before the candidate was handed over (not device time of the candidate)."""
        return {"pre_start": self.host_s + self.device_s, "pre_calibration": self.calibration_s}

    def cost(self) -> dict[str, Any]:
        idle = (self.handed_at or time.monotonic()) - self.ready_at
        return {"host_s": round(self.host_s, 4), "slot_wait_s": round(self.slot_wait_s, 4),
                "standby_s": round(self.standby_s, 4), "gate_wait_s": round(self.gate_wait_s, 4),
                "device_s": round(self.device_s, 4), "setup_s": {k: round(v, 4) for k, v in self.setup_s.items()},
                "calibration_s": round(self.calibration_s, 4), "environment_s": round(self.environment_s, 4),
                "idle_s": round(idle, 4), "acquire_wait_s": round(self.acquire_wait_s, 4),
                "yielded_s": round(self.yielded_s, 4)}

    def discard(self) -> None:
        """Kill the child (it was not used, or must not be) and remove its directory."""
        _kill(self.session)
        shutil.rmtree(self.work_dir, ignore_errors=True)


def _kill(session: ChildSession) -> None:
    session.kill()
    session.close(timeout_s=5.0)


@dataclass(frozen=True)
class Interval:
    """One spawn (spawn to `Started`) or one set-up (gate passed to ready) on `device`: `timeline`'s rows."""

    device: str
    kind: str
    """"spawn" or "set_up"."""
    begin: float
    end: float


@dataclass
class _Slot:
    """One device: its gate, its stocks, and what its threads are doing."""

    device: str
    gate: DeviceGate = field(default_factory=DeviceGate)
    ready: list[WarmChild] = field(default_factory=list)
    standby: list[Standby] = field(default_factory=list)
    want_task: TaskId | None = None
    starting: set[ChildSession] = field(default_factory=set)
    """Children between spawn and ready, standby ones included (killed by `close`)."""
    spawning: int = 0
    """Spawns under way (counted from the decision to spawn, before the start slot, so that spawners agree)."""
    warming: int = 0
    """Set-ups under way (counted from the decision, before the gate)."""
    in_flight: int = 0
    """Children handed out whose session is not closed yet (their candidate is being judged)."""
    handed_mark: int = 0
    """`gate.timed_begun` when the last child was handed out: equal now means that candidate has begun no timed
    phase yet, so a set-up now runs beside its untimed start."""
    failures: int = 0
    last_error: str = ""
    threads: list[threading.Thread] = field(default_factory=list)
    counts: dict[str, int] = field(default_factory=lambda: {"spawned": 0, "started": 0, "served": 0, "dead": 0,
                                                            "recycled": 0, "retired": 0, "failed": 0})


def expect_reply(session: ChildSession, model: type[R], timeout_s: float) -> R:
    """The next reply must be an ok `model` (a spare runs only our code: anything else is a broken start)."""
    reply = session.receive(timeout_s)
    parsed = msg.parse_reply(reply.header, model)
    if not isinstance(parsed, model) or not parsed.ok:
        raise RuntimeError(f"the spare answered {reply.header.get('op')!r} (ok={reply.header.get('ok')}) instead of "
                           f"{msg.op_of(model)!r}: {(parsed.error.message if parsed.error else '')[:500]}")
    return parsed
