"""GET /healthz (the process answers) and GET /readyz (the database answers and its schema is current)."""

from __future__ import annotations

from fastapi import APIRouter
from fastapi.responses import JSONResponse
from sqlalchemy import func, select, text

from service.api import schemas
from service.api.deps import DatabaseDep
from service.db.migrate import head_revision
from service.db.models import Job, utcnow
from service.queue.states import ACTIVE, JobState

router = APIRouter(tags=["health"])


@router.get("/healthz", response_model=schemas.Health, summary="Liveness")
def healthz() -> schemas.Health:
    return schemas.Health(status="ok")


@router.get("/readyz", response_model=schemas.Health, summary="Readiness: database reachable, schema current",
            responses={503: {"model": schemas.Health}})
def readyz(db: DatabaseDep):  # noqa: ANN201
    """Also reports the queue: jobs queued, jobs held by workers, and how many workers hold a live lease now
    (an idle worker holds none, so 0 does not mean no worker is running)."""
    try:
        with db.transaction(read_only=True) as session:
            revision = session.execute(text("SELECT version_num FROM alembic_version")).scalar()
            queued = session.scalar(select(func.count()).where(Job.state == JobState.QUEUED))
            held = session.scalar(select(func.count()).where(Job.state.in_(ACTIVE)))
            workers = session.scalar(select(func.count(func.distinct(Job.worker_id))).where(
                Job.state.in_(ACTIVE), Job.lease_expires_at > utcnow()))
    except Exception as exc:  # noqa: BLE001 -- any database failure means "not ready"; the reason is reported
        return JSONResponse(status_code=503, content={"status": "unavailable", "detail": {"error": str(exc)[:500]}})
    head = head_revision()
    if revision != head:
        return JSONResponse(status_code=503, content={"status": "migrations pending",
                                                      "detail": {"revision": revision, "head": head}})
    return schemas.Health(status="ready", detail={"revision": revision, "queued": queued, "held": held,
                                                  "busy_workers": workers})
