"""Assemble the FastAPI app: settings, database, routers. `uvicorn service.main:create_app --factory`."""

from __future__ import annotations

from contextlib import asynccontextmanager

from fastapi import FastAPI
from fastapi_offline import FastAPIOffline

from service.api import errors
from service.api.stream_hub import StreamHub
from service.api.verdict_waits import VerdictWaits
from service.api.routes import health, keys, leaderboard, submissions, tasks
from service.api.routes import admin, judging
from service.api.routes import batches, profiles, rewards
from service.observability import metrics
from service.core.config import Settings, get_settings
from service.db.session import Database
from service import web

DESCRIPTION = """Submit candidate GPU kernels for KernelBench-style tasks; each is compiled, run in an isolated
sandbox, checked against the PyTorch reference, timed against eager and torch.compile, and ranked.

Writes need an API key (`Authorization: Bearer kj_...`); tasks, submissions and leaderboards are readable
without one. A submission's verdict is public, its source is not: only its submitter and the admin key read it,
until it is made public (`public: true`, PATCH /v1/submissions/{id}) or the operator's
JUDGE_SOURCES_PUBLIC_AFTER passes. Submissions are queued durably and judged by workers; follow one with
`GET /v1/submissions/{id}` or its server-sent events."""


def create_app(settings: Settings | None = None) -> FastAPI:
    settings = settings or get_settings()

    @asynccontextmanager
    async def lifespan(app: FastAPI):  # noqa: ANN202
        waits = VerdictWaits()
        waits.start(settings.db_url)  # event streams and reward calls wake when their verdict is stored
        app.state.verdict_waits = waits
        # every event stream of this process is watched by one task (issue 41)
        app.state.stream_hub = StreamHub(app.state.db, settings.sse_poll_s, settings.sources_public_after, waits)
        yield
        await app.state.stream_hub.close()
        waits.close()
        app.state.db.dispose()

    # FastAPIOffline: /docs and /redoc load Swagger UI and ReDoc from the package, not from a CDN.
    app = FastAPIOffline(title="Kernel Judge", version="1", description=DESCRIPTION, lifespan=lifespan)
    errors.install(app)
    app.state.settings = settings
    app.state.db = Database(settings.db_url)
    for module in (submissions, tasks, leaderboard, keys, health):
        app.include_router(module.router)
    app.include_router(judging.router)  # GET /v1/judging (issue 40)
    app.include_router(admin.router)  # GET /v1/admin/workers
    app.include_router(metrics.router)  # GET /metrics
    app.include_router(batches.router)  # /v1/batches (issue 8)
    app.include_router(rewards.router)  # /v1/rewards (issue 8)
    app.include_router(profiles.router)  # GET /v1/submissions/{id}/profile (issue 28)
    app.include_router(web.router)  # the pages: /, /leaderboard/{task}, /submissions/{id}, /batches/{id} (issue 9)
    web.mount_static(app)  # /static: the pages' CSS and JS, shipped in the package
    return app
