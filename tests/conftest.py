"""Shared fixtures: database URLs for SQLite and PostgreSQL, so service tests run against both.

`db_url` is parametrised over both back ends. SQLite: a fresh file per test. PostgreSQL: one fresh
database per test session on 127.0.0.1:5432 (JUDGE_TEST_PG_URL overrides the server), migrated once,
emptied before each test, dropped at the end.

The `slow` marker is given by what a test uses: any test that needs one of SLOW_FIXTURES (directly or through
another fixture) is marked here, so `pytest -m "not slow"` leaves out real builds, sandboxed children, servers,
workers and browsers without anyone marking tests by hand; modules that start such things without a fixture say
`pytestmark = pytest.mark.slow` themselves.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

PG_SERVER = os.environ.get("JUDGE_TEST_PG_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/test")
TABLES = ("verdicts", "job_attempts", "jobs", "submissions", "batches", "api_keys", "workers")
SLOW_FIXTURES = frozenset({
    "db_url",  # a freshly migrated database per test, on SQLite and on the PostgreSQL server
    "judge_root",  # the shared build and baseline caches: every user builds candidates or runs the judge's children
    "spawn", "live_api",  # real worker and API processes (tests/service/conftest.py)
    "site", "browser", "page",  # a served site and the chromium that reads it (tests/web/conftest.py)
})


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if SLOW_FIXTURES & set(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.slow)


def _psycopg_dsn(url: str) -> str:
    return url.replace("postgresql+psycopg://", "postgresql://", 1)


@pytest.fixture(scope="session")
def pg_url() -> Iterator[str]:
    import psycopg

    from service.db.migrate import upgrade

    name = f"kj_test_{os.getpid()}_{uuid.uuid4().hex[:8]}"
    server = _psycopg_dsn(PG_SERVER)
    with psycopg.connect(server, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    url = PG_SERVER.rsplit("/", 1)[0] + f"/{name}"
    upgrade(url)
    yield url
    with psycopg.connect(server, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.fixture(scope="session")
def judge_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One build cache and one baseline cache for the whole run, shared by the sandbox and service tests and,
    under pytest-xdist, by every worker: builds and baseline measurements are locked per key with flock
    (sandbox.build.compiler.build_lock, sandbox.execution.baseline), so each candidate compiles once per run, not once
    per
    fixture or per worker."""
    base = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        base = base.parent  # the run's directory, above each worker's own
    root = base / "judge-shared"
    root.mkdir(exist_ok=True)
    return root


@pytest.fixture(params=["sqlite", "postgresql"])
def db_url(request: pytest.FixtureRequest, tmp_path) -> str:  # noqa: ANN001
    from service.db.migrate import upgrade

    if request.param == "sqlite":
        url = f"sqlite:///{tmp_path / 'judge.db'}"
        upgrade(url)
        return url
    url = request.getfixturevalue("pg_url")
    import psycopg

    with psycopg.connect(_psycopg_dsn(url), autocommit=True) as conn:
        conn.execute(f"TRUNCATE {', '.join(TABLES)} RESTART IDENTITY CASCADE")
    return url
