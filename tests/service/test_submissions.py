"""POST /v1/submissions and GET /v1/submissions/{id}: validation, idempotency, auth, rate limit, quota."""

from __future__ import annotations

from fastapi.testclient import TestClient
from sqlalchemy import func, select

from service.db.models import Job, Submission
from service.db.session import Database
from service.queue import claims as q

from tests.service.conftest import CORRECT_KL_DIV

SOURCE = CORRECT_KL_DIV.read_text()


def submit(client: TestClient, auth: dict, **fields) -> object:  # noqa: ANN003
    body = {"task": "kl_div", "source": SOURCE, **fields}
    return client.post("/v1/submissions", json=body, headers=auth)


def count(db: Database, model: type) -> int:
    with db.transaction(read_only=True) as s:
        return s.scalar(select(func.count()).select_from(model))


def test_submit_returns_202_with_location_and_writes_submission_and_job(client, auth, db):
    response = submit(client, auth, model="m-7b", sampling={"temperature": 0.7}, sample_index=2, tags=["a"])
    assert response.status_code == 202, response.text
    body = response.json()
    assert response.headers["location"] == f"/v1/submissions/{body['id']}" == body["location"]
    assert body["status"] == "queued" and body["duplicate"] is False
    assert count(db, Submission) == 1 and count(db, Job) == 1

    view = client.get(body["location"]).json()
    assert view["status"] == "queued" and view["stage"] == "queued" and view["position"] == 0
    assert view["submitter"] == "alice" and view["model"] == "m-7b" and view["sample_index"] == 2
    assert view["sampling"] == {"temperature": 0.7} and view["tags"] == ["a"]
    assert view["verdict"] is None and view["timestamps"]["queued_at"].endswith("Z")


def test_position_in_queue_counts_jobs_ahead(client, auth):
    ids = [submit(client, auth).json()["id"] for _ in range(3)]
    assert [client.get(f"/v1/submissions/{i}").json()["position"] for i in ids] == [0, 1, 2]


def test_status_moves_through_stages_and_reports_verdict(client, auth, db):
    from sandbox.verdict import Status, Verdict

    sub_id = submit(client, auth).json()["id"]
    (claim,) = q.claim(db, "w", 1, 60)
    assert client.get(f"/v1/submissions/{sub_id}").json()["status"] == "compiling"
    assert q.advance(db, claim.token, q.JobState.COMPILED)
    assert client.get(f"/v1/submissions/{sub_id}").json()["stage"] == "compiled"
    assert q.advance(db, claim.token, q.JobState.RUNNING)
    assert client.get(f"/v1/submissions/{sub_id}").json()["status"] == "running"
    verdict = Verdict(status=Status.INCORRECT, diagnosis="trial 0: off by 1e-2", task="kl_div", device="cpu",
                      source_sha256=claim.source_sha256)
    assert q.finish(db, claim.token, verdict, "w", q.RetryPolicy()) == "verdict"
    view = client.get(f"/v1/submissions/{sub_id}").json()
    assert view["status"] == "done" and view["position"] is None
    assert view["verdict"]["status"] == "incorrect" and view["verdict"]["diagnosis"] == "trial 0: off by 1e-2"
    stamps = view["timestamps"]
    assert stamps["queued_at"] <= stamps["compile_started_at"] <= stamps["compiled_at"] <= stamps["run_started_at"] \
        <= stamps["finished_at"]


def test_idempotent_resubmission_returns_the_first(client, auth, db):
    first = submit(client, auth, idempotency_key="run-1/0")
    again = submit(client, auth, idempotency_key="run-1/0")
    assert first.status_code == again.status_code == 202
    assert again.json()["id"] == first.json()["id"] and again.json()["duplicate"] is True
    assert again.headers["idempotent-replayed"] == "true"
    header = client.post("/v1/submissions", json={"task": "kl_div", "source": SOURCE},
                         headers={**auth, "Idempotency-Key": "run-1/0"})
    assert header.json()["id"] == first.json()["id"]
    assert count(db, Submission) == 1 and count(db, Job) == 1


def test_idempotency_key_reused_for_other_source_is_409(client, auth):
    assert submit(client, auth, idempotency_key="k").status_code == 202
    response = submit(client, auth, idempotency_key="k", source=SOURCE + "\n# changed\n")
    assert response.status_code == 409 and "different task or source" in response.json()["detail"]


def test_idempotency_keys_are_per_api_key(client, auth, db):
    from service import crud

    other = {"Authorization": f"Bearer {crud.create_key(db, 'bob')[1]}"}
    a = submit(client, auth, idempotency_key="same").json()["id"]
    b = submit(client, other, idempotency_key="same").json()["id"]
    assert a != b


def test_text_body_with_task_in_query(client, auth):
    response = client.post("/v1/submissions?task=kl_div&model=m&tag=x&tag=y", content=SOURCE.encode(),
                           headers={**auth, "Content-Type": "text/x-python"})
    assert response.status_code == 202, response.text
    view = client.get(response.headers["location"]).json()
    assert view["model"] == "m" and view["tags"] == ["x", "y"]


def test_source_over_the_limit_is_413(client, auth, settings):
    big = "# " + "x" * settings.max_source_bytes
    response = submit(client, auth, source=big)
    assert response.status_code == 413
    assert response.json()["detail"]["limit_bytes"] == settings.max_source_bytes
    assert "JUDGE_MAX_SOURCE_BYTES" in response.json()["detail"]["message"]


def test_request_body_over_the_limit_is_413_before_reading(client, auth, settings):
    response = client.post("/v1/submissions?task=kl_div", content=b"x" * (settings.max_request_bytes + 1),
                           headers={**auth, "Content-Type": "text/plain"})
    assert response.status_code == 413 and "JUDGE_MAX_REQUEST_BYTES" in response.json()["detail"]["message"]


def test_unknown_task_is_404_listing_valid_ids(client, auth):
    response = submit(client, auth, task="softmax")
    assert response.status_code == 404
    assert response.json()["detail"]["valid_task_ids"] == ["kl_div", "cross_entropy"]


def test_empty_source_is_422(client, auth):
    for source in ("", "   \n\t"):
        response = submit(client, auth, source=source)
        assert response.status_code == 422 and response.json()["detail"]["message"] == "the source is empty"


def test_non_utf8_source_is_422(client, auth):
    response = client.post("/v1/submissions?task=kl_div", content=b"import torch\n\xff\xfe bad",
                           headers={**auth, "Content-Type": "text/plain"})
    assert response.status_code == 422 and "not valid UTF-8" in response.json()["detail"]["message"]
    # JSON cannot carry raw bytes, but it can carry an unpaired surrogate, which is not UTF-8 either.
    raw = b'{"task": "kl_div", "source": "import torch\\ud800"}'
    response = client.post("/v1/submissions", content=raw, headers={**auth, "Content-Type": "application/json"})
    assert response.status_code == 422 and response.json()["detail"]["errors"][0]["type"] == "json_invalid"
    response = client.post("/v1/submissions", content=b'{"task": "kl_div", "source": "\xff"}',
                           headers={**auth, "Content-Type": "application/json"})
    assert response.status_code == 422 and "not valid UTF-8" in response.json()["detail"]["message"]


def test_malformed_body_is_422_naming_the_field(client, auth):
    response = client.post("/v1/submissions", json={"task": "kl_div"}, headers=auth)
    assert response.status_code == 422
    assert response.json()["detail"]["errors"][0]["loc"] == ["source"]


def test_submitting_needs_a_valid_key(client, api_key, db):
    from service import crud

    assert client.post("/v1/submissions", json={"task": "kl_div", "source": SOURCE}).status_code == 401
    wrong = client.post("/v1/submissions", json={"task": "kl_div", "source": SOURCE},
                        headers={"Authorization": "Bearer kj_nope"})
    assert wrong.status_code == 401 and wrong.headers["www-authenticate"] == "Bearer"
    ok = client.post("/v1/submissions", json={"task": "kl_div", "source": SOURCE}, headers={"X-API-Key": api_key})
    assert ok.status_code == 202
    (row,) = [k for k in crud.list_keys(db) if k.submitter == "alice"]
    crud.revoke_key(db, row.id)
    assert client.post("/v1/submissions", json={"task": "kl_div", "source": SOURCE},
                       headers={"X-API-Key": api_key}).status_code == 401


def test_anyone_can_read_a_submission(client, auth):
    sub_id = submit(client, auth).json()["id"]
    assert client.get(f"/v1/submissions/{sub_id}").status_code == 200
    assert client.get("/v1/submissions/nope").status_code == 404


def test_rate_limit_429_with_retry_after(client, auth, settings):
    settings.rate_limit_burst = 3
    settings.rate_limit_per_minute = 6  # one token every 10 s
    codes = [submit(client, auth).status_code for _ in range(4)]
    assert codes == [202, 202, 202, 429]
    limited = submit(client, auth)
    assert limited.status_code == 429 and 1 <= int(limited.headers["retry-after"]) <= 10
    # Idempotent replays are free: they do not spend tokens.
    assert submit(client, auth, idempotency_key="x").status_code == 429


def test_rate_limit_is_per_key(client, auth, settings, db):
    from service import crud

    settings.rate_limit_burst = 1
    settings.rate_limit_per_minute = 1
    assert submit(client, auth).status_code == 202
    assert submit(client, auth).status_code == 429
    other = {"Authorization": f"Bearer {crud.create_key(db, 'bob')[1]}"}
    assert submit(client, other).status_code == 202


def test_queue_quota_429_until_jobs_finish(client, auth, settings, db):
    from sandbox.verdict import Status, Verdict

    settings.queue_quota = 2
    assert [submit(client, auth).status_code for _ in range(2)] == [202, 202]
    over = submit(client, auth)
    assert over.status_code == 429 and over.headers["retry-after"] == str(settings.quota_retry_after_s)
    assert "queue quota" in over.json()["detail"]
    (claim,) = q.claim(db, "w", 1, 60)
    q.finish(db, claim.token, Verdict(status=Status.CORRECT, diagnosis="ok", task="kl_div", device="cpu",
                                      source_sha256="x"), "w", q.RetryPolicy())
    assert submit(client, auth).status_code == 202
