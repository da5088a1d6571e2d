"""The `workers` table from the worker's side: register at start, refresh on every heartbeat, mark stopped.

A row is the worker's public face: GET /v1/admin/workers lists the rows, /metrics sums their `stats`.
Nothing depends on a row for safety (leases and claim tokens do that), so a failed write is only logged.
"""

from __future__ import annotations

import os
import socket
from typing import Any

from sqlalchemy import update

from service.db.models import WorkerRow, utcnow
from service.db.session import Database


def register(db: Database, worker_id: str, devices: list[str], judge_mode: str) -> None:
    now = utcnow()
    with db.transaction() as session:
        session.merge(WorkerRow(id=worker_id, host=socket.gethostname(), pid=os.getpid(), devices=list(devices),
                                judge_mode=judge_mode, started_at=now, last_seen_at=now, stopped_at=None,
                                current_jobs=[], stats={}))


def beat(db: Database, worker_id: str, current_jobs: list[dict[str, Any]], stats: dict[str, Any]) -> None:
    with db.transaction() as session:
        session.execute(update(WorkerRow).where(WorkerRow.id == worker_id)
                        .values(last_seen_at=utcnow(), current_jobs=current_jobs, stats=stats))


def stopped(db: Database, worker_id: str, stats: dict[str, Any]) -> None:
    now = utcnow()
    with db.transaction() as session:
        session.execute(update(WorkerRow).where(WorkerRow.id == worker_id)
                        .values(last_seen_at=now, stopped_at=now, current_jobs=[], stats=stats))
