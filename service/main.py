"""Assemble the FastAPI app: settings, database, routers. `uvicorn service.main:create_app --factory`."""

from __future__ import annotations

from contextlib import asynccontextmanager

from fastapi import FastAPI

from service.api.routes import health, keys, leaderboard, submissions, tasks
from service.core.config import Settings, get_settings
from service.db.session import Database

DESCRIPTION = """Submit candidate GPU kernels for KernelBench-style tasks; each is compiled, run in an isolated
sandbox, checked against the PyTorch reference, timed against eager and torch.compile, and ranked.

Writes need an API key (`Authorization: Bearer kj_...`); tasks, submissions and leaderboards are readable
without one. Submissions are queued durably and judged by workers; follow one with
`GET /v1/submissions/{id}` or its server-sent events."""


def create_app(settings: Settings | None = None) -> FastAPI:
    settings = settings or get_settings()

    @asynccontextmanager
    async def lifespan(app: FastAPI):  # noqa: ANN202
        yield
        app.state.db.dispose()

    app = FastAPI(title="Kernel Judge", version="1", description=DESCRIPTION, lifespan=lifespan)
    app.state.settings = settings
    app.state.db = Database(settings.db_url)
    for module in (submissions, tasks, leaderboard, keys, health):
        app.include_router(module.router)
    return app
