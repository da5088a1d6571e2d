"""/v1/batches on SQLite and PostgreSQL: upload forms and per-line errors, dedup, the view, results as JSONL and
CSV, metrics, cancel, listing; and one batch of real candidates through a real worker.

Most tests drive the queue with the real claim/finish functions and synthetic verdicts (what a worker would
record), so the API's views are checked against known verdicts in milliseconds; the last test runs the real
sandbox on the CPU.
"""

from __future__ import annotations

import csv
import io
import json

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import select

from sandbox.verdict import Performance, Status, TimingStats, Verdict
from service.db.models import Batch, Job, Submission
from service.main import create_app
from service.queue import claims as q
from service.queue.states import JobState
from tests.service.conftest import CORPUS, CORRECT_KL_DIV, new_key, wait_for

CORRECT = CORRECT_KL_DIV.read_text()
WRONG = (CORPUS / "cpu" / "kl_div_wrong_direction.py").read_text()
COMPILE_ERROR = (CORPUS / "cpu" / "compile_error.py").read_text()
NO_CANDIDATE = (CORPUS / "cpu" / "no_candidate.md").read_text()
HOSTILE = '''import torch
import torch.nn as nn
import torch.nn.functional as F


class ModelNew(nn.Module):
    def forward(self, predictions, targets):
        return F.kl_div(torch.log(predictions), targets, reduction="batchmean")
'''
"""Calls the reference operator: a static policy violation, caught before anything is built."""
COMPLETION_OF_CORRECT = f"Here is my kernel, after some thought.\n\n```python\n{CORRECT}```\nIt should be fast.\n"
"""Different text, same extracted module as CORRECT: a duplicate."""
NDJSON = {"Content-Type": "application/x-ndjson"}


def jsonl(*lines: object) -> str:
    return "\n".join(line if isinstance(line, str) else json.dumps(line) for line in lines) + "\n"


def post_batch(client, auth, body, headers=NDJSON, **params):
    return client.post("/v1/batches", content=body, headers={**auth, **headers}, params=params)


def verdict(task: str, status: Status, eager: float | None = None, compile_: float | None = None) -> Verdict:
    perf = None
    if eager is not None:
        stats = TimingStats(median_ms=1.0, q25_ms=0.9, q75_ms=1.1, min_ms=0.8, mean_ms=1.0, reps=10)
        perf = Performance(candidate=stats, speedups={"eager": eager, "compile": compile_}, min_bytes=1 << 20)
    return Verdict(status=status, diagnosis=f"synthetic {status.value}", task=task, device="cpu",
                   source_sha256="0" * 64, performance=perf,
                   stages={"compile": 0.5} if status is not Status.COMPILE_ERROR else {})


def claim_all(db, n):
    return q.claim(db, "test-worker", n, lease_s=60)


def finish(db, claim, v):
    assert q.finish(db, claim.token, v, "test-worker", q.RetryPolicy()) == "verdict"


def test_jsonl_upload_accepts_good_lines_reports_bad_ones_and_dedups(client, auth, db):
    body = jsonl(
        {"task": "kl_div", "source": CORRECT, "model": "m", "sample_index": 0, "metadata": {"run": 1}},  # 1
        "",                                                                                               # 2 blank
        '{"task": "kl_div", "source": ',                                                                  # 3
        {"task": "matmul", "source": CORRECT},                                                           # 4
        {"task": "kl_div"},                                                                               # 5
        {"task": "kl_div", "completion": COMPLETION_OF_CORRECT, "model": "m", "sample_index": 1},        # 6 dup of 1
        {"task": "kl_div", "source": WRONG, "model": "m", "sample_index": 2},                            # 7
        {"task": "kl_div", "source": "   \n"},                                                           # 8
        {"task": "cross_entropy", "completion": NO_CANDIDATE, "model": "m"},                             # 9
        {"task": "kl_div", "source": WRONG, "sorce": "typo"},                                            # 10
        {"task": "kl_div", "source": CORRECT, "parent_id": "f" * 32},                                    # 11
        [1, 2],                                                                                          # 12
    )
    r = post_batch(client, auth, body, name="run-1")
    assert r.status_code == 202, r.text
    out = r.json()
    assert (out["accepted"], out["duplicates"], out["judged"]) == (4, 1, 3)
    assert r.headers["location"] == out["url"] == f"/v1/batches/{out['id']}"
    errors = {e["line"]: e["error"] for e in out["rejected"]}
    assert sorted(errors) == [3, 4, 5, 8, 10, 11, 12]
    assert "not valid JSON" in errors[3]
    assert "unknown task 'matmul'" in errors[4] and "kl_div" in errors[4]
    assert "exactly one of `source`" in errors[5]
    assert "empty" in errors[8]
    assert "sorce" in errors[10]
    assert "parent_id" in errors[11] and "not a submission" in errors[11]
    assert "JSON object" in errors[12]

    with db.transaction(read_only=True) as s:
        subs = {x.line: x for x in s.scalars(select(Submission).where(Submission.batch_id == out["id"]))}
        jobs = {j.submission_id: j for j in s.scalars(select(Job))}
    assert sorted(subs) == [1, 6, 7, 9]
    assert subs[6].duplicate_of == subs[1].id and subs[6].id not in jobs  # a duplicate has no job of its own
    assert subs[1].sample_metadata == {"run": 1} and subs[6].source == COMPLETION_OF_CORRECT  # stored as sent
    # fair order: the batch's jobs take consecutive virtual start times from an empty queue's 0
    assert sorted(jobs[subs[n].id].fair_key for n in (1, 7, 9)) == [0, 1, 2]

    view = client.get(out["url"]).json()
    assert view["name"] == "run-1" and view["state"] == "running" and view["total"] == 4
    assert view["counts"] == {"queued": 3} and view["verdicts"] == {} and view["duplicates"] == 1
    assert view["progress"] == 0 and view["eta_s"] is None and view["metrics"]["samples"] == 0
    assert [e["line"] for e in view["rejected"]] == [3, 4, 5, 8, 10, 11, 12]


def test_json_forms_and_whole_body_errors(client, auth, settings):
    sample = {"task": "kl_div", "source": CORRECT}
    as_list = client.post("/v1/batches", json=[sample, {"task": "kl_div", "source": WRONG}], headers=auth)
    assert as_list.status_code == 202 and as_list.json()["accepted"] == 2
    wrapped = client.post("/v1/batches", json={"name": "obj", "tags": ["t"], "samples": [sample, 3]}, headers=auth)
    assert wrapped.status_code == 202 and wrapped.json()["rejected"] == [
        {"line": 2, "error": "expected a JSON object (a sample), got int"}]
    view = client.get(wrapped.json()["url"]).json()
    assert view["name"] == "obj" and view["tags"] == ["t"]
    jsonlines = post_batch(client, auth, jsonl(sample), headers={"Content-Type": "application/jsonl"})
    assert jsonlines.status_code == 202

    none_good = post_batch(client, auth, jsonl({"task": "kl_div"}, "nope"))
    assert none_good.status_code == 422
    assert [e["line"] for e in none_good.json()["rejected"]] == [1, 2]
    assert client.post("/v1/batches", json=sample, headers=auth).status_code == 422  # an object without samples
    assert post_batch(client, auth, jsonl(sample), headers={"Content-Type": "application/xml"}).status_code == 415
    assert post_batch(client, auth, b"\xff\n").status_code == 422  # not UTF-8
    assert client.post("/v1/batches", content=jsonl(sample), headers=NDJSON).status_code == 401
    too_big = CORRECT + "#" * settings.max_source_bytes
    r = post_batch(client, auth, jsonl(sample, {"task": "kl_div", "source": too_big}))
    assert r.status_code == 202 and "JUDGE_MAX_SOURCE_BYTES" in r.json()["rejected"][0]["error"]

    small = settings.model_copy(update={"max_batch_bytes": 4096, "max_batch_samples": 2})
    with TestClient(create_app(small)) as tight:
        r = post_batch(tight, auth, jsonl({"task": "kl_div", "source": "#" * 5000}))
        assert r.status_code == 413 and "JUDGE_MAX_BATCH_BYTES" in r.json()["detail"]
        r = post_batch(tight, auth, jsonl({"task": "kl_div", "source": "x"}, {"task": "kl_div", "source": "y"},
                                          {"task": "kl_div", "source": "z"}))
        assert r.status_code == 413 and "JUDGE_MAX_BATCH_SAMPLES" in r.json()["detail"]
    quota = settings.model_copy(update={"batch_queue_quota": 3})
    with TestClient(create_app(quota)) as tight:
        r = post_batch(tight, auth, jsonl({"task": "kl_div", "source": "a = 1"}))
        assert r.status_code == 429 and "JUDGE_BATCH_QUEUE_QUOTA" in r.json()["detail"] and r.headers["retry-after"]


def test_results_metrics_and_cancel_follow_the_queue(client, auth, db):
    sources = [f"{CORRECT}\n# variant {i}\n" for i in range(5)]
    body = jsonl(*({"task": "kl_div", "source": s, "model": "m", "sample_index": i, "metadata": {"i": i}}
                   for i, s in enumerate(sources)),
                 {"task": "kl_div", "source": sources[0], "model": "m", "sample_index": 5})  # line 6 dup of line 1
    batch = post_batch(client, auth, body).json()
    url = batch["url"]
    # An interactive submission queued after the batch is still claimed first.
    inter = client.post("/v1/submissions", json={"task": "kl_div", "source": CORRECT}, headers=auth).json()
    first = claim_all(db, 1)
    assert [c.submission_id for c in first] == [inter["id"]]
    held = claim_all(db, 3)  # lines 1, 2, 3 in line order
    finish(db, held[0], verdict("kl_div", Status.CORRECT, eager=2.0, compile_=0.5))
    finish(db, held[1], verdict("kl_div", Status.INCORRECT))

    view = client.get(url).json()
    assert view["counts"] == {"compiling": 1, "done": 2, "queued": 2}
    assert view["verdicts"] == {"correct": 2, "incorrect": 1}  # the duplicate shares line 1's verdict
    assert view["progress"] == pytest.approx(3 / 6) and view["eta_s"] is not None and view["eta_s"] >= 0
    assert view["metrics"]["samples"] == 3 and client.get(url, params={"metrics": False}).json()["metrics"] is None

    other = {"Authorization": f"Bearer {new_key(db, 'mallory')}"}
    assert client.post(f"{url}/cancel", headers=other).status_code == 403
    assert client.post("/v1/batches/nope/cancel", headers=auth).status_code == 404
    cancelled = client.post(f"{url}/cancel", headers=auth).json()
    assert cancelled["state"] == "cancelled" and cancelled["counts"] == {"cancelled": 2, "compiling": 1, "done": 2}
    assert cancelled["finished_at"] is None  # line 3 is still held by a worker: it runs to its verdict
    assert claim_all(db, 10) == []  # cancelled jobs are never claimed
    finish(db, held[2], verdict("kl_div", Status.COMPILE_ERROR))
    done = client.get(url).json()
    assert done["state"] == "cancelled" and done["progress"] == 1.0 and done["finished_at"] is not None

    # with the batch's key: a private sample's diagnosis is its submitter's (service/visibility.py)
    rows = [json.loads(line) for line in client.get(f"{url}/results", headers=auth).text.splitlines()]
    assert [r["line"] for r in rows] == [1, 2, 3, 4, 5, 6]
    assert [r["status"] for r in rows] == ["correct", "incorrect", "compile_error", None, None, "correct"]
    assert [r["state"] for r in rows] == ["done", "done", "done", "cancelled", "cancelled", "done"]
    assert rows[0]["speedup_eager"] == 2.0 and rows[0]["speedup_compile"] == 0.5 and rows[0]["median_ms"] == 1.0
    assert rows[0]["compiled"] is True and rows[0]["correct"] is True and rows[2]["compiled"] is False
    assert rows[5]["duplicate_of"] == rows[0]["submission_id"] and rows[5]["speedup_eager"] == 2.0
    assert rows[1]["metadata"] == {"i": 1} and rows[1]["diagnosis"] == "synthetic incorrect"

    as_csv = client.get(f"{url}/results", headers={**auth, "Accept": "text/csv"})
    assert as_csv.headers["content-type"].startswith("text/csv")
    table = list(csv.DictReader(io.StringIO(as_csv.text)))
    assert [t["status"] for t in table] == ["correct", "incorrect", "compile_error", "", "", "correct"]
    assert table[0]["correct"] == "true" and table[1]["correct"] == "false" and table[3]["correct"] == ""
    assert table[5]["duplicate_of"] == table[0]["submission_id"] and json.loads(table[4]["metadata"]) == {"i": 4}
    assert client.get(f"{url}/results", params={"format": "csv"}, headers=auth).text == as_csv.text

    m = client.get(f"{url}/metrics").json()
    # judged: lines 1, 2, 3 and the duplicate 6 (4 samples); 4 and 5 cancelled
    assert m["overall"]["samples"] == 4 and m["overall"]["unjudged"] == 2
    assert m["overall"]["correct_rate"] == 0.5 and m["overall"]["compile_rate"] == 0.75
    assert m["overall"]["fast_p"]["eager"]["1"] == 0.5 and m["overall"]["fast_p"]["compile"]["1"] == 0.0
    assert m["by_task_model"][0]["task"] == "kl_div" and m["by_task_model"][0]["model"] == "m"
    assert client.get("/v1/batches/nope/metrics").status_code == 404
    assert client.get("/v1/batches/nope/results").status_code == 404
    assert client.get(f"/v1/submissions/{rows[3]['submission_id']}").json()["status"] == "cancelled"


def test_list_batches_newest_first_with_a_cursor(client, auth, db):
    ids = [post_batch(client, auth, jsonl({"task": "kl_div", "source": f"x = {i}"})).json()["id"] for i in range(3)]
    page = client.get("/v1/batches", params={"limit": 2}, headers=auth).json()
    assert [b["id"] for b in page["items"]] == ids[::-1][:2] and page["next_cursor"] == ids[1]
    rest = client.get("/v1/batches", params={"limit": 2, "cursor": page["next_cursor"]}, headers=auth).json()
    assert [b["id"] for b in rest["items"]] == [ids[0]] and rest["next_cursor"] is None
    assert [b["id"] for b in client.get("/v1/batches", params={"offset": 2}, headers=auth).json()["items"]] == [ids[0]]
    other = {"Authorization": f"Bearer {new_key(db, 'bob')}"}
    assert client.get("/v1/batches", headers=other).json() == {"items": [], "next_cursor": None}
    unknown = client.get("/v1/batches", params={"cursor": "nope"}, headers=auth)
    assert unknown.status_code == 404 and "cursor" in unknown.json()["detail"]  # as GET /v1/submissions
    assert client.get("/v1/batches").status_code == 401
    assert client.get("/v1/batches/nope").status_code == 404


@pytest.mark.parametrize("db_url", ["postgresql"], indirect=True)
def test_a_batch_of_real_candidates_through_a_real_worker(client, auth, db, spawn):
    body = jsonl(
        {"task": "kl_div", "source": CORRECT, "model": "m", "sample_index": 0},
        {"task": "kl_div", "completion": COMPLETION_OF_CORRECT, "model": "m", "sample_index": 1},
        {"task": "kl_div", "source": WRONG, "model": "m", "sample_index": 2},
        {"task": "kl_div", "source": COMPILE_ERROR, "model": "m", "sample_index": 3},
        {"task": "kl_div", "source": HOSTILE, "model": "m", "sample_index": 4},
        {"task": "cross_entropy", "completion": NO_CANDIDATE, "model": "m", "sample_index": 0},
        "{malformed",
    )
    batch = post_batch(client, auth, body).json()
    assert (batch["accepted"], batch["duplicates"], batch["rejected"][0]["line"]) == (6, 1, 7)
    worker = spawn("worker")
    wait_for(lambda: client.get(batch["url"]).json()["state"] == "done", 600, "the batch to be judged")

    rows = [json.loads(line) for line in client.get(f"{batch['url']}/results", headers=auth).text.splitlines()]
    statuses = [r["status"] for r in rows]
    assert statuses == ["correct", "correct", "incorrect", "compile_error", "policy_violation", "compile_error"], \
        [r["diagnosis"] for r in rows]
    assert rows[1]["duplicate_of"] == rows[0]["submission_id"] and rows[1]["median_ms"] == rows[0]["median_ms"] > 0
    assert rows[0]["speedup_eager"] > 0 and rows[0]["compiled"] is True
    assert "not declared" in rows[3]["diagnosis"] or "undeclared" in rows[3]["diagnosis"]
    assert rows[4]["compiled"] is False and "kl_div" in rows[4]["diagnosis"]
    assert "ModelNew" in rows[5]["diagnosis"]
    view = client.get(batch["url"]).json()
    assert view["counts"] == {"done": 5} and view["progress"] == 1.0 and view["finished_at"] is not None
    assert view["verdicts"] == {"compile_error": 2, "correct": 2, "incorrect": 1, "policy_violation": 1}
    by_group = {(g["task"], g["model"]): g for g in client.get(f"{batch['url']}/metrics").json()["by_task_model"]}
    kl = by_group[("kl_div", "m")]
    # kl_div/m: 5 samples, 2 correct (one a duplicate); compiled: the 2 correct and the incorrect one
    assert (kl["samples"], kl["correct_rate"], kl["compile_rate"]) == (5, 0.4, 0.6)
    assert kl["pass_at_k"]["1"] == pytest.approx(0.4) and kl["pass_at_k"]["5"] == 1.0
    with db.transaction(read_only=True) as s:
        assert s.scalar(select(Batch.duplicates).where(Batch.id == batch["id"])) == 1
        assert all(j.state is JobState.DONE for j in s.scalars(select(Job)))
    assert worker.terminate() == 0


def test_extraction_runs_before_the_write_transaction(client, auth, db, monkeypatch):
    # The dedup key costs CPU in proportion to the text: computed while parsing, never under the write lock.
    def inside_the_transaction(task, text):
        raise AssertionError("code_key called inside create_batch's transaction")

    monkeypatch.setattr("service.batches.store.code_key", inside_the_transaction)
    body = jsonl({"task": "kl_div", "source": CORRECT}, {"task": "kl_div", "completion": COMPLETION_OF_CORRECT})
    r = post_batch(client, auth, body)
    assert r.status_code == 202, r.text
    assert (r.json()["accepted"], r.json()["duplicates"]) == (2, 1)
    rewards = client.post("/v1/rewards", json={"task": "kl_div", "deadline_s": 0.1, "completions": [CORRECT]},
                          headers=auth)
    assert rewards.status_code == 200, rewards.text
    assert rewards.json()["results"][0]["submission_id"] is not None
