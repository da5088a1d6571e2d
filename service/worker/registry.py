"""The `workers` table from the worker's side: register at start, refresh on every heartbeat, mark stopped; and
the one thing readiness reads of it, `local_stalls`.

A row is the worker's public face: GET /v1/admin/workers lists the rows, /metrics sums their `stats`.
Nothing depends on a row for safety (leases and claim tokens do that), so a failed write is only logged.
"""

from __future__ import annotations

import os
import socket
from typing import Any

from sqlalchemy import select, update
from sqlalchemy.orm import Session

from service.db.models import WorkerRow, utcnow
from service.db.session import Database
from service.worker.lifeline import parent_of


def register(db: Database, worker_id: str, devices: list[str], judge_mode: str,
             judges: list[str] | None = None, role: str | None = None) -> None:
    """`judges`: what the worker can judge (sandbox/needs.py `Capabilities.words`), which the service reads to know
    what it can judge (service/queue/capability.py); None says nothing (a builder's). `role`: build, run or all
    (service/worker/roles.py), which run workers read to know whether a builder is alive."""
    now = utcnow()
    with db.transaction() as session:
        session.merge(WorkerRow(id=worker_id, host=socket.gethostname(), pid=os.getpid(), devices=list(devices),
                                judge_mode=judge_mode, started_at=now, last_seen_at=now, stopped_at=None,
                                current_jobs=[], stats={}, judges=judges, role=role))


def beat(db: Database, worker_id: str, current_jobs: list[dict[str, Any]], stats: dict[str, Any]) -> None:
    with db.transaction() as session:
        session.execute(update(WorkerRow).where(WorkerRow.id == worker_id)
                        .values(last_seen_at=utcnow(), current_jobs=current_jobs, stats=stats))


def stopped(db: Database, worker_id: str, stats: dict[str, Any]) -> None:
    now = utcnow()
    with db.transaction() as session:
        session.execute(update(WorkerRow).where(WorkerRow.id == worker_id)
                        .values(last_seen_at=now, stopped_at=now, current_jobs=[], stats=stats))


def local_stalls(session: Session, pid: int | None = None) -> dict[str, list[dict[str, Any]]]:
    """The stalled jobs (service.worker.watchdog) of each running worker that process `pid` (this one) runs or
    started: a row of this host whose pid is `pid`, or whose parent is (`kernel-judge serve` starts its worker as
    a child). Workers of other processes are not this process's readiness: /metrics shows them all."""
    pid = os.getpid() if pid is None else pid
    rows = session.execute(select(WorkerRow.id, WorkerRow.pid, WorkerRow.stats).where(
        WorkerRow.host == socket.gethostname(), WorkerRow.stopped_at.is_(None))).all()
    return {ident: (stats or {}).get("stalled") for ident, worker_pid, stats in rows
            if (stats or {}).get("stalled") and pid in (worker_pid, parent_of(worker_pid))}


def registered(session: Session, pid: int) -> bool:
    """Whether the worker process `pid` of this host has registered and not stopped (readiness of `serve`)."""
    return session.scalar(select(WorkerRow.id).where(
        WorkerRow.host == socket.gethostname(), WorkerRow.pid == pid, WorkerRow.stopped_at.is_(None)).limit(1)) \
        is not None
