"""Admin: GET /v1/admin/workers, the workers that heartbeat into this database and the jobs they hold now
(Authorization: Bearer $JUDGE_ADMIN_KEY)."""

from __future__ import annotations

import datetime as dt
from typing import Annotated, Any

from fastapi import APIRouter, Query
from pydantic import BaseModel
from sqlalchemy import select

from service.api.deps import AdminDep, ReadSessionDep, SettingsDep
from service.api.errors import responses
from service.db.models import Job, WorkerRow, utcnow
from service.queue.states import ACTIVE, JobState

router = APIRouter(prefix="/v1/admin", tags=["admin"], dependencies=[AdminDep], responses=responses(401, 403, 422, 503))


def _utc(value: dt.datetime | None) -> dt.datetime | None:
    return value.replace(tzinfo=dt.timezone.utc) if value is not None else None


class HeldJob(BaseModel):
    job_id: int
    submission_id: str
    task_id: str
    state: JobState
    """The job's state in the queue (the database's view)."""
    phase: str | None
    """Where the worker said the job was at its last heartbeat (service.queue.states.HeldPhase)."""
    lease_expires_at: dt.datetime | None


class WorkerOut(BaseModel):
    id: str
    host: str
    pid: int
    devices: list[str]
    judge_mode: str
    started_at: dt.datetime
    last_seen_at: dt.datetime
    stopped_at: dt.datetime | None
    alive: bool
    """Not stopped and heard from within two leases."""
    jobs: list[HeldJob]
    stats: dict[str, Any]


@router.get("/workers", response_model=list[WorkerOut], summary="List workers and their current jobs")
def list_workers(session: ReadSessionDep, settings: SettingsDep,
                 seen_within_s: Annotated[int, Query(ge=1, le=366 * 86400,
                                                     description="Only workers heard from this recently")] = 86400,
                 ) -> list[WorkerOut]:
    now = utcnow()
    rows = session.scalars(select(WorkerRow).where(WorkerRow.last_seen_at >= now - dt.timedelta(seconds=seen_within_s))
                           .order_by(WorkerRow.started_at.desc())).all()
    held: dict[str, list[Job]] = {}
    for job in session.scalars(select(Job).where(Job.state.in_(ACTIVE), Job.worker_id.in_([r.id for r in rows]))
                               .order_by(Job.id)):
        held.setdefault(job.worker_id, []).append(job)
    out = []
    for row in rows:
        phases = {j.get("job_id"): j.get("phase") for j in row.current_jobs or []}
        alive = row.stopped_at is None and (now - row.last_seen_at).total_seconds() <= 2 * settings.lease_s
        jobs = [HeldJob(job_id=j.id, submission_id=j.submission_id, task_id=j.task_id, state=j.state,
                        phase=phases.get(j.id), lease_expires_at=_utc(j.lease_expires_at))
                for j in held.get(row.id, [])]
        out.append(WorkerOut(id=row.id, host=row.host, pid=row.pid, devices=list(row.devices or []),
                             judge_mode=row.judge_mode, started_at=_utc(row.started_at),
                             last_seen_at=_utc(row.last_seen_at), stopped_at=_utc(row.stopped_at), alive=alive,
                             jobs=jobs, stats=row.stats or {}))
    return out
