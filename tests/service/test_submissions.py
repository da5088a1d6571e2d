"""POST /v1/submissions and GET /v1/submissions/{id}: validation, idempotency, auth, rate limit, quota."""

from __future__ import annotations

from fastapi.testclient import TestClient
from sqlalchemy import func, select

from service.db.models import Job, Submission
from service.db.session import Database
from service.queue import claims as q

from tests.service.conftest import CORRECT_KL_DIV, new_key

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
                      judged_sha256=claim.text_sha256)
    assert q.finish(db, claim.token, verdict, "w", q.RetryPolicy()) == "verdict"
    view = client.get(f"/v1/submissions/{sub_id}", headers=auth).json()  # the diagnosis: to its submitter
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
    other = {"Authorization": f"Bearer {new_key(db, 'bob')}"}
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
    assert response.json()["limit_bytes"] == settings.max_source_bytes
    assert "JUDGE_MAX_SOURCE_BYTES" in response.json()["detail"]


def test_request_body_over_the_limit_is_413_before_reading(client, auth, settings):
    response = client.post("/v1/submissions?task=kl_div", content=b"x" * (settings.max_request_bytes + 1),
                           headers={**auth, "Content-Type": "text/plain"})
    assert response.status_code == 413 and "JUDGE_MAX_REQUEST_BYTES" in response.json()["detail"]
    # What a user who sent a too-large kernel needs is the source's own limit, which is the smaller one.
    assert f"{settings.max_source_bytes} bytes (JUDGE_MAX_SOURCE_BYTES)" in response.json()["detail"]
    assert response.json()["source_limit_bytes"] == settings.max_source_bytes


def test_unknown_task_is_404_listing_valid_ids(client, auth):
    response = submit(client, auth, task="softmax")
    assert response.status_code == 404
    assert response.json()["valid_task_ids"] == ["kl_div", "cross_entropy", "kl_div_train", "cross_entropy_train"]


def test_empty_source_is_422(client, auth):
    for source in ("", "   \n\t"):
        response = submit(client, auth, source=source)
        assert response.status_code == 422 and response.json()["detail"] == "the source is empty"


def test_non_utf8_source_is_422(client, auth):
    response = client.post("/v1/submissions?task=kl_div", content=b"import torch\n\xff\xfe bad",
                           headers={**auth, "Content-Type": "text/plain"})
    assert response.status_code == 422 and "not valid UTF-8" in response.json()["detail"]
    # JSON cannot carry raw bytes, but it can carry an unpaired surrogate, which is not UTF-8 either.
    raw = b'{"task": "kl_div", "source": "import torch\\ud800"}'
    response = client.post("/v1/submissions", content=raw, headers={**auth, "Content-Type": "application/json"})
    assert response.status_code == 422 and response.json()["errors"][0]["type"] == "json_invalid"
    response = client.post("/v1/submissions", content=b'{"task": "kl_div", "source": "\xff"}',
                           headers={**auth, "Content-Type": "application/json"})
    assert response.status_code == 422 and "not valid UTF-8" in response.json()["detail"]


def test_malformed_body_is_422_naming_the_field(client, auth):
    response = submit(client, auth, sample_index="3")
    assert response.status_code == 422
    assert response.json()["errors"][0]["loc"] == ["body", "sample_index"]


def test_completion_is_accepted_as_in_a_batch_line(client, auth, db):
    completion = "Here is my kernel.\n```python\n" + SOURCE + "```\n"
    response = client.post("/v1/submissions", json={"task": "kl_div", "completion": completion}, headers=auth)
    assert response.status_code == 202, response.text
    source = client.get(f"/v1/submissions/{response.json()['id']}/source", headers=auth).json()["source"]
    assert source == completion
    # With the key in the header too (the body is validated a second time with it).
    response = client.post("/v1/submissions", json={"task": "kl_div", "completion": completion},
                           headers={**auth, "Idempotency-Key": "c-1"})
    assert response.status_code == 202, response.text


def test_neither_or_both_of_source_and_completion_is_422_naming_both(client, auth, db):
    for extra in ({}, {"source": SOURCE, "completion": SOURCE}):
        response = client.post("/v1/submissions", json={"task": "kl_div", **extra}, headers=auth)
        assert response.status_code == 422, response.text
        assert "`source`" in response.json()["detail"] and "`completion`" in response.json()["detail"]
    assert count(db, Submission) == 0


def test_submitting_needs_a_valid_key(client, api_key, db):
    from service import crud

    assert client.post("/v1/submissions", json={"task": "kl_div", "source": SOURCE}).status_code == 401
    wrong = client.post("/v1/submissions", json={"task": "kl_div", "source": SOURCE},
                        headers={"Authorization": "Bearer kj_nope"})
    assert wrong.status_code == 401 and wrong.headers["www-authenticate"] == "Bearer"
    ok = client.post("/v1/submissions", json={"task": "kl_div", "source": SOURCE}, headers={"X-API-Key": api_key})
    assert ok.status_code == 202
    with db.transaction() as session:
        (row,) = [k for k in crud.list_keys(session) if k.submitter == "alice"]
        crud.revoke_key(session, row.id)
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
    settings.rate_limit_burst = 1
    settings.rate_limit_per_minute = 1
    assert submit(client, auth).status_code == 202
    assert submit(client, auth).status_code == 429
    other = {"Authorization": f"Bearer {new_key(db, 'bob')}"}
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


# --- GET /v1/submissions and /v1/submissions/{id}/source ---------------------------------------------

def listing(client: TestClient, auth: dict, **params) -> list[dict]:  # noqa: ANN003
    response = client.get("/v1/submissions", params=params, headers=auth)
    assert response.status_code == 200, response.text
    return response.json()["items"]


def test_list_shows_only_your_submissions_newest_first(client, auth, db):
    mine = [submit(client, auth, model=f"m{i % 2}", tags=[f"t{i}"]).json()["id"] for i in range(3)]
    bob = {"Authorization": f"Bearer {new_key(db, 'bob')}"}
    submit(client, bob)
    items = listing(client, auth)
    assert {item["id"] for item in items} == set(mine)
    stamps = [item["created_at"] for item in items]
    assert stamps == sorted(stamps, reverse=True)
    assert items[0]["status"] == "queued" and items[0]["verdict"] is None
    assert client.get("/v1/submissions").status_code == 401


def test_list_filters(client, auth, db):
    from sandbox.verdict import Status, Verdict

    a = submit(client, auth, model="m1", tags=["x", "y"]).json()["id"]
    b = submit(client, auth, model="m2", tags=["y"]).json()["id"]
    c = client.post("/v1/submissions?task=cross_entropy", content=b"# a candidate\n",
                    headers={**auth, "Content-Type": "text/plain"}).json()["id"]
    ids = lambda **params: {item["id"] for item in listing(client, auth, **params)}  # noqa: E731
    assert ids(task="kl_div") == {a, b} and ids(task="cross_entropy") == {c}
    assert ids(model="m2") == {b}
    assert ids(tag="y") == {a, b} and ids(tag="x") == {a} and ids(tag="z") == set()
    assert ids(status="queued") == {a, b, c} and ids(status="done") == set()
    assert ids(batch="no-such-batch") == set()
    (claim,) = q.claim(db, "w", 1, 60)
    q.finish(db, claim.token, Verdict(status=Status.CORRECT, diagnosis="ok", task="kl_div", device="cpu",
                                      source_sha256="x"), "w", q.RetryPolicy())
    assert ids(status="done") == {claim.submission_id} and ids(verdict="correct") == {claim.submission_id}
    assert ids(verdict="incorrect") == set()
    assert client.get("/v1/submissions?status=finished", headers=auth).status_code == 422


def test_list_pages_follow_a_stable_cursor(client, auth):
    first = {submit(client, auth).json()["id"] for _ in range(5)}
    seen, cursor, pages = [], None, 0
    while True:
        params = {"limit": 2, **({"cursor": cursor} if cursor else {})}
        page = client.get("/v1/submissions", params=params, headers=auth).json()
        seen += [item["id"] for item in page["items"]]
        pages += 1
        if pages == 1:
            submit(client, auth)  # arrives while paging: lands before the cursor, so it neither repeats nor shifts
        cursor = page["next_cursor"]
        if cursor is None:
            break
    assert pages == 3 and len(seen) == len(set(seen)) == 5 and set(seen) == first


def test_source_is_returned_to_its_submitter_only(client, auth, db):
    completion = "Here is my kernel.\n```python\n" + SOURCE + "```\nIt is fast.\n"
    sub_id = submit(client, auth, source=completion).json()["id"]
    mine = client.get(f"/v1/submissions/{sub_id}/source", headers=auth)
    assert mine.status_code == 200 and mine.json()["source"] == completion and mine.json()["task"] == "kl_div"
    bob = {"Authorization": f"Bearer {new_key(db, 'bob')}"}
    assert client.get(f"/v1/submissions/{sub_id}/source", headers=bob).status_code == 404
    assert client.get(f"/v1/submissions/{sub_id}/source").status_code == 401
    assert client.get("/v1/submissions/nope/source", headers=auth).status_code == 404


def test_concurrent_posts_with_one_idempotency_key_make_one_submission(client, auth, db):
    from concurrent.futures import ThreadPoolExecutor

    # On PostgreSQL the losers of the insert race hit the unique constraint inside a savepoint and return the
    # winner's submission (crud.create_submission); on SQLite writers queue on the lock.
    with ThreadPoolExecutor(16) as pool:
        responses = list(pool.map(lambda _: submit(client, auth, idempotency_key="race"), range(16)))
    assert [r.status_code for r in responses] == [202] * 16, [r.text for r in responses if r.status_code != 202]
    assert len({r.json()["id"] for r in responses}) == 1
    assert sum(not r.json()["duplicate"] for r in responses) == 1
    assert count(db, Submission) == 1 and count(db, Job) == 1


def test_source_answers_the_text_itself_to_accept_text_plain(client, auth, db):
    sub_id = submit(client, auth).json()["id"]
    url = f"/v1/submissions/{sub_id}/source"
    text = client.get(url, headers={**auth, "Accept": "text/plain"})
    assert text.status_code == 200 and text.headers["content-type"] == "text/plain; charset=utf-8"
    assert text.text == SOURCE and text.headers["vary"] == "Accept"
    for accept in ("application/json", "*/*", "text/plain;q=0.5, application/json", None):
        answer = client.get(url, headers={**auth, **({"Accept": accept} if accept else {})})
        assert answer.headers["content-type"] == "application/json", accept
        assert answer.json()["source"] == SOURCE
    # The same visibility either way: another submitter's key sees nothing, no key is told to send one.
    bob = {"Authorization": f"Bearer {new_key(db, 'bob')}", "Accept": "text/plain"}
    assert client.get(url, headers=bob).status_code == 404
    assert client.get(url, headers={"Accept": "text/plain"}).status_code == 401


def test_source_documents_both_media_types(client):
    content = client.get("/openapi.json").json()["paths"]["/v1/submissions/{submission_id}/source"]["get"][
        "responses"]["200"]["content"]
    assert content["text/plain"]["schema"] == {"type": "string"}
    assert content["application/json"]["schema"] == {"$ref": "#/components/schemas/SubmissionSource"}


def test_the_text_hash_is_text_sha256_and_still_source_sha256_for_existing_clients(client, auth, db):
    """One meaning per name: `text_sha256` is the sha256 of the text as sent; `source_sha256`, its first name, keeps
    the same value in the responses, and the database column keeps that name (no migration)."""
    import hashlib

    from sqlalchemy import text

    sub_id = submit(client, auth).json()["id"]
    expected = hashlib.sha256(SOURCE.encode()).hexdigest()
    view = client.get(f"/v1/submissions/{sub_id}", headers=auth).json()  # the digest: to its submitter
    source = client.get(f"/v1/submissions/{sub_id}/source", headers=auth).json()
    assert view["text_sha256"] == view["source_sha256"] == expected
    assert source["text_sha256"] == source["source_sha256"] == expected
    with db.transaction(read_only=True) as s:
        assert s.get(Submission, sub_id).text_sha256 == expected
        stored = s.execute(text("SELECT source_sha256 FROM submissions WHERE id = :id"), {"id": sub_id}).scalar_one()
    assert stored == expected
