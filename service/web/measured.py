"""What the figures on a page were measured at: the input shape and the device, read from the verdicts.

A task has an official shape (kl_div: 16384×16384) and a small CPU shape (64×512); the sandbox times a
candidate at the official shape on a GPU and at the CPU shape on a CPU (sandbox/execution/run.py), and every
correctness trial runs at the timed shape. So the shape a verdict's timings belong to is its first trial's
`shape`, and the device is its `device` ("cpu", "cuda:0") and `environment.device_name`. A page labels its
numbers with these, never with the task's official shape, which a CPU verdict was not measured at.

CPU timings are for developing the judge and candidates: at the CPU size one kernel's speedup was seen to
move between 0.85x and 1.22x from run to run, so a CPU page says so (`CPU_NOTE`) and is not a ranking.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from sandbox.verdict import Verdict
from service.db.models import VerdictRow

CPU_NOTE = ("CPU timings are for developing the judge and candidates; they move run to run (0.85-1.22x seen) "
            "and are not a ranking.")


@dataclass(frozen=True)
class Measured:
    """The shape and device one verdict's timings were measured at."""

    device_name: str
    """The device model (baselines and leaderboards are kept per model): "NVIDIA H100 80GB HBM3", "cpu:x86_64"."""
    device: str
    """The torch device the candidate ran on: "cuda:0", "cpu"."""
    shape: tuple[int, ...] | None
    """The input shape of the timed calls; None when the verdict ran no trial (never for a timed verdict)."""

    @property
    def on_cpu(self) -> bool:
        return self.device.split(":", 1)[0] == "cpu"

    @property
    def shape_text(self) -> str:
        return "×".join(str(n) for n in self.shape) if self.shape else "an unrecorded shape"

    @property
    def label(self) -> str:
        """"64×512 on cpu", "16384×16384 on NVIDIA H100 80GB HBM3"."""
        return f"{self.shape_text} on {'cpu' if self.on_cpu else self.device_name}"


def from_columns(device_name: str | None, device: str | None, shape: list | str | None) -> Measured:
    """From a verdict's columns and its shape as `shape_column` reads it (JSON text) or as a list."""
    if isinstance(shape, str):
        shape = json.loads(shape)
    return Measured(device_name or device or "unknown device", device or "unknown",
                    tuple(int(n) for n in shape) if shape else None)


def of_verdict(verdict: Verdict) -> Measured:
    env = verdict.environment
    return from_columns(env.device_name if env else None, verdict.device,
                        verdict.trials[0].shape if verdict.trials else None)


def shape_column():  # noqa: ANN202 - a SQLAlchemy JSON path expression
    """The first trial's shape as JSON text ("[64,512]"), read inside the database (SQLite json_extract,
    PostgreSQL #>>): the verdict's JSON, compile log included, is never loaded for it. Text, not JSON, so that
    PostgreSQL can take DISTINCT of it (its json type has no equality)."""
    return VerdictRow.verdict[("trials", 0, "shape")].as_string().label("shape")


def of_submissions(session: Session, submission_ids: Iterable[str]) -> dict[str, Measured]:
    """The measurement of each of these submissions' verdicts (those that have one); one indexed query."""
    ids = sorted(set(submission_ids))
    out: dict[str, Measured] = {}
    for start in range(0, len(ids), 500):
        rows = session.execute(select(VerdictRow.submission_id, VerdictRow.device_name, VerdictRow.device,
                                      shape_column()).where(VerdictRow.submission_id.in_(ids[start:start + 500])))
        out.update({r.submission_id: from_columns(r.device_name, r.device, r.shape) for r in rows})
    return out


def newest_per_device(session: Session, task: str) -> dict[str, Measured]:
    """Per device model, the measurement of the newest timed verdict: the one the task's baselines (eager,
    torch.compile, speed-of-light) are read from (service.crud.device_baselines), so it labels them."""
    newest = (select(VerdictRow.device_name, func.max(VerdictRow.id).label("id"))
              .where(VerdictRow.task_id == task, VerdictRow.median_ms.is_not(None),
                     VerdictRow.device_name.is_not(None))
              .group_by(VerdictRow.device_name).subquery())
    rows = session.execute(select(VerdictRow.device_name, VerdictRow.device, shape_column())
                           .join(newest, newest.c.id == VerdictRow.id))
    return {r.device_name: from_columns(r.device_name, r.device, r.shape) for r in rows}


def distinct(measured: Iterable[Measured]) -> list[Measured]:
    return sorted(set(measured), key=lambda m: (m.device_name, m.device, m.shape or ()))


def describe(measured: Iterable[Measured]) -> str:
    """One phrase for several measurements: "64×512 on cpu", or "64×512 on cpu; 16384×16384 on NVIDIA H100"."""
    return "; ".join(m.label for m in distinct(measured))
