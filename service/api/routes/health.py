"""GET /healthz (the process answers) and GET /readyz (the database answers and stores, its schema is current, and
the worker this process runs or started is not stalled).

Both are anonymous: a database failure is answered with a generic reason, never the driver's text (it names the
database host, port, user and database); the detail goes to the log, and to a caller with the admin key."""

from __future__ import annotations

import logging
import time

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse
from sqlalchemy import func, select, text

from service.api import schemas
from service.api.deps import DatabaseDep, SettingsDep
from service.db import storage
from service.db.migrate import head_revision
from service.core.security import same_secret
from service.db.models import Job, utcnow
from service.queue.states import ACTIVE, JobState
from service.worker import headers
from service.worker.registry import local_stalls, registered

log = logging.getLogger(__name__)

router = APIRouter(tags=["health"])

DATABASE_UNAVAILABLE = "the database did not answer"
"""/readyz's public reason for any database failure."""


def _offered_key(request: Request) -> str | None:
    """The key a caller sent, if any, read from the headers themselves: /readyz is anonymous, and a security
    dependency would declare it as needing a key in the OpenAPI document (clients and fuzzers then expect 401)."""
    scheme, _, token = request.headers.get("authorization", "").partition(" ")
    if scheme.lower() == "bearer" and token.strip():
        return token.strip()
    return request.headers.get("x-api-key")


@router.get("/healthz", response_model=schemas.Health, summary="Liveness")
def healthz() -> schemas.Health:
    return schemas.Health(status="ok")


@router.get("/readyz", response_model=schemas.Health, summary="Readiness: database reachable, schema current",
            responses={503: {"model": schemas.Health}})
def readyz(request: Request, db: DatabaseDep, settings: SettingsDep):  # noqa: ANN201
    """Also reports the queue: jobs queued, jobs held by workers, and how many workers hold a live lease now
    (an idle worker holds none, so 0 does not mean no worker is running); and `shared_headers`, the running
    workers' build of the shared precompiled headers (`building` with its progress, then `done`). 503 "worker
    stalled" while the worker that this process runs or started (`kernel-judge serve`'s) has stalled jobs whose
    threads have not come back; 503 "worker starting" until that worker has registered (Settings.local_worker_pid)."""
    try:
        with db.transaction(read_only=True) as session:
            revision = session.execute(text("SELECT version_num FROM alembic_version")).scalar()
            queued = session.scalar(select(func.count()).where(Job.state == JobState.QUEUED))
            held = session.scalar(select(func.count()).where(Job.state.in_(ACTIVE)))
            workers = session.scalar(select(func.count(func.distinct(Job.worker_id))).where(
                Job.state.in_(ACTIVE), Job.lease_expires_at > utcnow()))
            stalls = local_stalls(session)
            starting = settings.local_worker_pid is not None and not registered(session, settings.local_worker_pid)
            shared_headers = headers.progress(session)
    except Exception as exc:  # noqa: BLE001 -- any database failure means "not ready"
        log.warning("readyz: the database failed: %s", exc)
        detail = {"reason": DATABASE_UNAVAILABLE}
        token = _offered_key(request)
        if settings.admin_key and token and same_secret(token, settings.admin_key):
            detail["error"] = str(exc)[:500]
        return JSONResponse(status_code=503, content={"status": "unavailable", "detail": detail})
    seen = db.storage_fault
    if seen is not None and seen.current():  # reads work, writes do not: not ready to take submissions
        return JSONResponse(status_code=503, content={"status": seen.fault.value, "detail": {
            "reason": storage.MESSAGES[seen.fault],
            "last_refused_s_ago": round(time.monotonic() - seen.at, 1)}})
    head = head_revision()
    if revision != head:
        return JSONResponse(status_code=503, content={"status": "migrations pending",
                                                      "detail": {"revision": revision, "head": head}})
    if starting:  # serve's worker has not said what it can judge: a submission now could wait for nobody
        return JSONResponse(status_code=503, content={"status": "worker starting", "detail": {
            "reason": "the worker this service started has not registered yet; what it can judge is known once it "
                      "has"}})
    if stalls:  # its watchdog saw jobs stuck far past their phase's limit (service.worker.watchdog)
        return JSONResponse(status_code=503, content={"status": "worker stalled", "detail": {
            "reason": "the local worker holds jobs stuck far past their phase's limit; they went back to the queue "
                      "and its thread stacks are in its log; restart it", "stalled": stalls}})
    detail = {"revision": revision, "queued": queued, "held": held, "busy_workers": workers}
    if shared_headers is not None:  # a first C++ build waits for these: say how far they are
        detail["shared_headers"] = shared_headers.model_dump()
    return schemas.Health(status="ready", detail=detail)
