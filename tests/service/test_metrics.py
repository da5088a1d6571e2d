"""/metrics, GET /v1/admin/workers and JSON logs, on SQLite and PostgreSQL, from real queue operations and a
real workers row (the metrics are read from the database, as they are with workers on other hosts)."""

from __future__ import annotations

import io
import json
import logging
import socket

from prometheus_client.parser import text_string_to_metric_families

from sandbox.verdict import Status, Verdict
from service import crud
from service.api.schemas import SubmissionCreate
from service.db.session import Database
from service.observability.logs import JobContextFilter, JsonFormatter, job_context
from service.observability.stats import WorkerStats
from service.queue import claims as q
from service.queue.states import HeldPhase, JobState
from service.worker import registry

from .conftest import ADMIN_KEY


def enqueue(db: Database, n: int, task: str = "kl_div") -> None:
    with db.transaction() as session:
        key = crud.create_key(session, "alice")[0]
        for i in range(n):
            crud.create_submission(session, key, SubmissionCreate(task=task, source=f"# {i}\n"))


def samples(text: str) -> dict[tuple[str, tuple], float]:
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def test_metrics_report_queue_verdicts_stages_and_devices(client, db):
    enqueue(db, 3)
    enqueue(db, 1, task="cross_entropy")
    done, running = q.claim(db, "host-a:1", 2, 60)
    assert q.advance(db, running.token, JobState.COMPILED) and q.advance(db, running.token, JobState.RUNNING)
    verdict = Verdict(status=Status.INCORRECT, diagnosis="trial 0", task="kl_div", device="cpu", source_sha256="x")
    assert q.finish(db, done.token, verdict, "host-a:1", q.RetryPolicy()) == "verdict"
    stats = WorkerStats()
    stats.observe("compile", 0.3)
    stats.observe("compile", 45.0)
    stats.observe("execute", 2000.0)  # beyond the last bound: counted only in +Inf
    stats.device_busy("cuda:0", 12.5)
    stats.outcome("verdict")
    registry.register(db, "host-a:1", ["cuda:0"], "sandbox")
    registry.beat(db, "host-a:1", [{"job_id": running.job_id, "phase": HeldPhase.EXECUTING.value}], stats.snapshot())

    response = client.get("/metrics")
    assert response.status_code == 200 and response.headers["content-type"].startswith("text/plain")
    got = samples(response.text)
    assert got[("judge_queue_jobs", (("state", "queued"), ("task", "kl_div")))] == 1
    assert got[("judge_queue_jobs", (("state", "running"), ("task", "kl_div")))] == 1
    assert got[("judge_queue_jobs", (("state", "compiling"), ("task", "kl_div")))] == 0
    assert got[("judge_queue_jobs", (("state", "queued"), ("task", "cross_entropy")))] == 1
    assert got[("judge_verdicts_total", (("status", "incorrect"), ("task", "kl_div")))] == 1
    assert got[("judge_stage_duration_seconds_bucket", (("le", "0.5"), ("stage", "compile")))] == 1
    assert got[("judge_stage_duration_seconds_bucket", (("le", "60.0"), ("stage", "compile")))] == 2
    assert got[("judge_stage_duration_seconds_count", (("stage", "compile"),))] == 2
    assert got[("judge_stage_duration_seconds_bucket", (("le", "1800.0"), ("stage", "execute")))] == 0
    assert got[("judge_stage_duration_seconds_bucket", (("le", "+Inf"), ("stage", "execute")))] == 1
    host = socket.gethostname()  # registry.register records the host it runs on
    assert got[("judge_device_busy_seconds_total", (("device", "cuda:0"), ("host", host)))] == 12.5
    assert got[("judge_finish_outcomes_total", (("outcome", "verdict"),))] == 1
    assert got[("judge_worker_up", (("worker", "host-a:1"),))] == 1
    assert got[("judge_worker_held_jobs", (("worker", "host-a:1"),))] == 1


def test_admin_lists_workers_and_the_jobs_they_hold(client, db):
    enqueue(db, 2)
    (held,) = q.claim(db, "host-b:7", 1, 60)
    registry.register(db, "host-b:7", ["cpu"], "compile-only")
    registry.beat(db, "host-b:7", [{"job_id": held.job_id, "phase": HeldPhase.COMPILING.value}], {})
    registry.register(db, "host-c:8", ["cpu"], "sandbox")
    registry.stopped(db, "host-c:8", {})

    assert client.get("/v1/admin/workers").status_code == 401
    response = client.get("/v1/admin/workers", headers={"Authorization": f"Bearer {ADMIN_KEY}"})
    assert response.status_code == 200
    workers = {w["id"]: w for w in response.json()}
    assert set(workers) == {"host-b:7", "host-c:8"}
    b = workers["host-b:7"]
    assert b["alive"] is True and b["judge_mode"] == "compile-only" and b["last_seen_at"].endswith("Z")
    assert [(j["job_id"], j["state"], j["phase"]) for j in b["jobs"]] == [(held.job_id, "compiling", "compiling")]
    assert workers["host-c:8"]["alive"] is False and workers["host-c:8"]["jobs"] == []


def test_json_logs_carry_the_job_and_submission():
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(JsonFormatter())
    handler.addFilter(JobContextFilter())
    logger = logging.getLogger("test.json-logs")
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    try:
        with job_context(job_id=12, submission_id="ab12"):
            logger.info("job %s: %s", 12, "correct", extra={"verdict": "correct"})
        logger.warning("outside")
    finally:
        logger.removeHandler(handler)
    inside, outside = (json.loads(line) for line in stream.getvalue().splitlines())
    assert inside["message"] == "job 12: correct" and inside["level"] == "INFO"
    assert (inside["job_id"], inside["submission_id"], inside["verdict"]) == (12, "ab12", "correct")
    assert "job_id" not in outside and outside["message"] == "outside"
