"""GET /healthz, /readyz; OpenAPI lists every versioned route; migrations go down and up on both back ends."""

from __future__ import annotations

from sqlalchemy import inspect

from service.db.migrate import downgrade, head_revision, upgrade
from service.db.session import Database


def test_healthz_and_readyz(client):
    assert client.get("/healthz").json() == {"status": "ok", "detail": {}}
    ready = client.get("/readyz")
    assert ready.status_code == 200
    assert ready.json()["detail"] == {"revision": head_revision(), "queued": 0, "held": 0, "busy_workers": 0}


def test_readyz_is_503_when_the_schema_is_missing(client, db_url):
    downgrade(db_url, "base")
    try:
        assert client.get("/readyz").status_code == 503
    finally:
        upgrade(db_url)
    assert client.get("/readyz").status_code == 200


def test_migrations_create_every_table(db: Database) -> None:
    tables = set(inspect(db.engine).get_table_names())
    assert {"api_keys", "submissions", "jobs", "job_attempts", "verdicts", "alembic_version"} <= tables


def test_openapi_documents_the_routes(client):
    spec = client.get("/openapi.json").json()
    assert {"/v1/submissions", "/v1/submissions/{submission_id}", "/v1/submissions/{submission_id}/events",
            "/v1/tasks", "/v1/tasks/{task_id}", "/v1/tasks/{task_id}/prompt", "/v1/leaderboard/{task_id}",
            "/healthz", "/readyz"} <= set(spec["paths"])
    post = spec["paths"]["/v1/submissions"]["post"]
    assert set(post["requestBody"]["content"]) == {"application/json", "text/plain"}
    assert {"202", "404", "413", "422", "429"} <= set(post["responses"])
