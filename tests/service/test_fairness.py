"""Fair claim order (service.batches.fairness): interactive first, concurrent batches round-robin; and a
measurement with a real worker: an interactive submission posted behind a 300-job batch is judged after at
most the jobs the worker already held, not after the batch drains."""

from __future__ import annotations

import hashlib
import json

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import func, insert, select

from service.db.models import ApiKey, Batch, Job, JobAttempt, Submission, new_id, utcnow
from service.db.session import Database
from service.queue import claims as q
from service.queue.states import JobState
from tests.service.conftest import CORRECT_KL_DIV, wait_for
from tests.service.test_batches import jsonl, post_batch

SOURCE = CORRECT_KL_DIV.read_text()
SOURCE_SHA256 = hashlib.sha256(SOURCE.encode()).hexdigest()


def upload(client: TestClient, auth: dict[str, str], label: str, n: int) -> dict[str, str]:
    """A batch of n distinct samples; returns submission id -> "label<i>"."""
    out = post_batch(client, auth, jsonl(*({"task": "kl_div", "source": f"x = {i}  # {label}"} for i in range(n))))
    assert out.status_code == 202
    rows = client.get(f"{out.json()['url']}/results").text.splitlines()
    return {json.loads(r)["submission_id"]: f"{label}{i}" for i, r in enumerate(rows)}


def next_claims(db: Database, labels: dict[str, str], n: int) -> list[str]:
    return [labels[c.submission_id] for _ in range(n) for c in q.claim(db, "w", 1, lease_s=60)]


def test_interactive_first_then_batches_round_robin(client, auth, db):
    labels = upload(client, auth, "A", 6)
    labels |= upload(client, auth, "B", 3)
    inter = client.post("/v1/submissions", json={"task": "kl_div", "source": SOURCE}, headers=auth).json()["id"]
    labels[inter] = "I"
    # A took virtual times 0..5; B arrived while A0 was still queued (virtual time 0): 0..2, interleaving 1:1.
    assert next_claims(db, labels, 4) == ["I", "A0", "B0", "A1"]
    # C arrives now: the smallest queued virtual time is B1's 1, so C starts there, behind nothing it would
    # have waited for under FIFO.
    labels |= upload(client, auth, "C", 2)
    assert next_claims(db, labels, 8) == ["B1", "C0", "A2", "B2", "C1", "A3", "A4", "A5"]
    assert q.claim(db, "w", 5, lease_s=60) == []


def _insert_batch(db: Database, n: int) -> str:
    """n queued batch jobs of one (already built) candidate, inserted in bulk as a large upload would be."""
    now = utcnow()
    with db.transaction() as s:
        key = s.scalars(select(ApiKey)).first()
        batch = Batch(id=new_id(), kind="batch", api_key_id=key.id, submitter=key.submitter, total=n, duplicates=0,
                      rejected=[], tags=[], created_at=now)
        s.add(batch)
        s.flush()
        ids = [new_id() for _ in range(n)]
        s.execute(insert(Submission), [
            {"id": i, "task_id": "kl_div", "source": SOURCE, "text_sha256": SOURCE_SHA256,
             "api_key_id": key.id, "submitter": key.submitter, "sampling": {}, "tags": [], "created_at": now,
             "batch_id": batch.id, "line": n_ + 1} for n_, i in enumerate(ids)])
        s.execute(insert(Job), [{"submission_id": i, "task_id": "kl_div", "state": JobState.QUEUED, "not_before": now,
                                 "queued_at": now, "fair_key": n_} for n_, i in enumerate(ids)])
    return batch.id


def _batch_done(db: Database, batch_id: str) -> int:
    with db.transaction(read_only=True) as s:
        return s.scalar(select(func.count()).select_from(Job).join(Submission, Submission.id == Job.submission_id)
                        .where(Submission.batch_id == batch_id, Job.state == JobState.DONE)) or 0


@pytest.mark.parametrize("db_url", ["postgresql"], indirect=True)
def test_an_interactive_submission_overtakes_a_300_job_batch(client, auth, db, spawn, capsys):
    total = 300
    batch_id = _insert_batch(db, total)
    worker = spawn("worker", JUDGE_MODE="compile-only")
    # The worker is warm (the build is cached) once it has judged a few batch jobs.
    wait_for(lambda: _batch_done(db, batch_id) >= 3, 300, "the worker to judge batch jobs")
    before = _batch_done(db, batch_id)
    sub = client.post("/v1/submissions", json={"task": "kl_div", "source": SOURCE}, headers=auth).json()["id"]
    posted = utcnow()  # the submission is committed (visible to every worker) from here on

    def finished() -> object:
        with db.transaction(read_only=True) as s:
            return s.scalar(select(Job.finished_at).where(Job.submission_id == sub, Job.state == JobState.DONE))

    at = wait_for(finished, 120, "the interactive submission's verdict")
    batch_attempts = (select(func.count()).select_from(JobAttempt).join(Job, Job.id == JobAttempt.job_id)
                      .join(Submission, Submission.id == Job.submission_id).where(Submission.batch_id == batch_id))
    with db.transaction(read_only=True) as s:
        mine = s.scalar(select(JobAttempt.id).join(Job, Job.id == JobAttempt.job_id).where(Job.submission_id == sub))
        # Batch jobs a worker claimed after the interactive job was visible and before claiming it: none.
        jumped = s.scalar(batch_attempts.where(JobAttempt.started_at > posted, JobAttempt.id < mine))
        done_by_then = s.scalar(select(func.count()).select_from(Job)
                                .join(Submission, Submission.id == Job.submission_id)
                                .where(Submission.batch_id == batch_id, Job.state == JobState.DONE,
                                       Job.finished_at <= at)) or 0
    with capsys.disabled():
        print(f"\nfairness: the interactive submission was claimed ahead of every queued batch job ({jumped} claimed "
              f"before it); {done_by_then - before} batch job(s) finished between the POST and its verdict (held "
              f"already, or finishing while the POST was answered); {total - done_by_then} of {total} were still "
              f"queued behind it (FIFO: it would have waited for {total - before})")
    assert jumped == 0
    # What finished meanwhile was already held by the worker (its compile pool and executor) when the POST
    # landed, or finishing while it was answered: a few, never the FIFO's ~290.
    assert done_by_then - before <= 40
    assert total - done_by_then >= total - 50
    assert worker.terminate() == 0
