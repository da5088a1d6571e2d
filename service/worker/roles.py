"""What a worker does: build, run, or both (issue 43: builds apart from the GPUs).

    all    claims jobs of both stages, builds and runs them: today's worker, and `serve`'s embedded default
    build  claims build-stage jobs only, builds them in its own sandbox and cache root, publishes the artifact
           (service/artifacts) and gives the job back in the run stage; runs no candidate, needs no GPU
    run    claims run-stage jobs only, loads their artifacts after checking them and runs them; while no builder
           is alive (`builders_alive`, from the workers table's heartbeats) it claims build-stage jobs too and
           builds them itself, so a fleet whose builders are all gone still judges

A worker claims per stage (service/queue/claims.py `claim(stage=...)`): `claim_stage` says which for this round.
"""

from __future__ import annotations

import datetime as dt
import enum
import threading
import time

from sqlalchemy import func, select

from service.db.models import WorkerRow, utcnow
from service.db.session import Database
from service.queue.states import Stage

BUILDERS_SEEN_EVERY_S = 2.0
"""How often a run worker reads whether a builder is alive: a count over the workers table, cheap, but no need to
read it on every claim round (every poll_s, 0.5 s); a builder's arrival or loss is noticed within this."""


class Role(str, enum.Enum):
    BUILD = "build"
    RUN = "run"
    ALL = "all"


def builders_alive(db: Database, lease_s: float, now: dt.datetime | None = None) -> int:
    """Builders that have not stopped and whose heartbeat (every lease_s / 4) came within two leases: the window
    /metrics counts a worker up in. A SIGKILLed builder stops counting two leases after its last beat; its held job
    returns to the build stage when its lease expires, and is claimed by a run worker once no builder counts."""
    since = (now or utcnow()) - dt.timedelta(seconds=2 * lease_s)
    with db.transaction(read_only=True) as session:
        return session.scalar(select(func.count()).select_from(WorkerRow).where(
            WorkerRow.role == Role.BUILD.value, WorkerRow.stopped_at.is_(None), WorkerRow.last_seen_at >= since)) or 0


class StageChooser:
    """The stage a worker of `role` claims this round (None: both, in the fair order)."""

    def __init__(self, role: Role, db: Database, lease_s: float) -> None:
        self.role, self.db, self.lease_s = role, db, lease_s
        self._builders = 0
        self._read_at = -BUILDERS_SEEN_EVERY_S
        self._lock = threading.Lock()

    def claim_stage(self) -> Stage | None:
        if self.role is Role.BUILD:
            return Stage.BUILD
        if self.role is Role.ALL:
            return None
        return Stage.RUN if self.builders() else None

    def builders(self) -> int:
        """Builders alive as last read (a failed read keeps the last answer: the claim itself will fail too)."""
        with self._lock:
            if time.monotonic() - self._read_at >= BUILDERS_SEEN_EVERY_S:
                self._read_at = time.monotonic()
                try:
                    self._builders = builders_alive(self.db, self.lease_s)
                except Exception:  # noqa: BLE001 - the database is away; the claim round says so
                    pass
            return self._builders
