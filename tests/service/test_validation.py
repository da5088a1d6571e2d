"""Bad input is a 4xx that says what to fix, never a 500, on SQLite and PostgreSQL alike.

Each case here was a 500 (or silently stored the wrong value) before: NUL characters (PostgreSQL text cannot
hold them), sample indexes beyond the column, NaN and infinities in JSON, empty idempotency keys, booleans
taken for integers. And every error body has one shape: {"detail": str, "errors": [{"loc", "msg", "type"}]}.
"""

from __future__ import annotations

import json

from fastapi.testclient import TestClient

from service.core.config import Settings
from service.main import create_app
from tests.service.conftest import ADMIN_KEY

SOURCE = "import torch\nclass ModelNew(torch.nn.Module):\n    pass\n"
ADMIN = {"Authorization": f"Bearer {ADMIN_KEY}"}


def post_json(client: TestClient, auth: dict, text: str):  # noqa: ANN201
    """Send a JSON body as raw text, so it may hold what json.dumps would not write (NaN, Infinity)."""
    return client.post("/v1/submissions", content=text.encode(), headers={**auth, "Content-Type": "application/json"})


def body(**fields) -> dict:  # noqa: ANN003
    return {"task": "kl_div", "source": SOURCE, **fields}


def assert_error(response, status: int, *words: str) -> dict:  # noqa: ANN001
    """The one error shape, with a message that names the problem."""
    assert response.status_code == status, response.text
    payload = response.json()
    assert isinstance(payload["detail"], str) and payload["detail"]
    assert isinstance(payload["errors"], list)
    for err in payload["errors"]:
        assert isinstance(err["loc"], list) and isinstance(err["msg"], str)
    text = json.dumps(payload).lower()
    for word in words:
        assert word.lower() in text, payload
    return payload


# --- NUL characters ------------------------------------------------------------------------------

# Cases are looped inside one test per database rather than parametrised: each parametrised test would migrate
# a fresh SQLite database, which costs more than all the requests.

def test_nul_in_a_submission_field_is_422(client, auth):
    for field in ("source", "model", "task", "idempotency_key"):
        value = SOURCE + "\x00" if field == "source" else "a\x00b"
        payload = assert_error(client.post("/v1/submissions", json=body(**{field: value}), headers=auth), 422, "NUL")
        assert payload["errors"][0]["loc"] == ["body", field]


def test_nul_in_tags_and_sampling_is_422(client, auth):
    assert_error(client.post("/v1/submissions", json=body(tags=["ok", "x\x00"]), headers=auth), 422, "NUL")
    assert_error(client.post("/v1/submissions", json=body(sampling={"k\x00": 1}), headers=auth), 422, "NUL")
    assert_error(client.post("/v1/submissions", json=body(sampling={"k": ["\x00"]}), headers=auth), 422, "NUL")


def test_nul_in_a_text_body_is_422(client, auth):
    response = client.post("/v1/submissions?task=kl_div", content=(SOURCE + "\x00").encode(),
                           headers={**auth, "Content-Type": "text/plain"})
    assert assert_error(response, 422, "NUL")["errors"][0]["loc"] == ["body", "source"]


def test_nul_in_a_key_submitter_is_422(client):
    assert_error(client.post("/v1/keys", json={"submitter": "al\x00ice"}, headers=ADMIN), 422, "NUL", "submitter")


NUL_URLS = [
    ("GET", "/v1/submissions/ab%00cd"),
    ("GET", "/v1/submissions/ab%00cd/source"),
    ("GET", "/v1/submissions/ab%00cd/events"),
    ("GET", "/v1/tasks/kl%00div"),
    ("DELETE", "/v1/keys/%00"),
    ("GET", "/v1/leaderboard/kl_div?device=H100%00"),
    ("GET", "/v1/submissions?model=%00"),
    ("POST", "/v1/submissions?task=kl_div&model=m%00"),
]


def test_nul_in_a_path_or_query_parameter_is_422(client, auth):
    for method, url in NUL_URLS:
        headers = {**auth, "Content-Type": "text/plain", **(ADMIN if "keys" in url else {})}
        assert_error(client.request(method, url, headers=headers, content=SOURCE.encode()), 422, "NUL")


def test_a_single_valued_query_parameter_given_twice_is_422(client, auth):
    payload = assert_error(client.get("/v1/submissions?model=a&model=b", headers=auth), 422, "given 2 times")
    assert payload["errors"] == [{"loc": ["query", "model"], "msg": "give this parameter once", "type": None}]
    assert_error(client.get("/v1/leaderboard/kl_div?limit=5&limit=6"), 422, "limit")
    # A list parameter repeats by design.
    headers = {**auth, "Content-Type": "text/plain"}
    ok = client.post("/v1/submissions?task=kl_div&tag=a&tag=b", content=SOURCE.encode(), headers=headers)
    assert ok.status_code == 202 and client.get(ok.headers["location"]).json()["tags"] == ["a", "b"]


# --- numbers -------------------------------------------------------------------------------------

def test_large_sample_index_is_stored_exactly(client, auth):
    for index in (2**31, 2**63 - 1):  # past INTEGER on PostgreSQL (a 500 before BIGINT), and the largest
        response = client.post("/v1/submissions", json=body(sample_index=index), headers=auth)
        assert response.status_code == 202, response.text
        assert client.get(response.headers["location"]).json()["sample_index"] == index


def test_sample_index_beyond_64_bits_or_negative_is_422(client, auth):
    for index in (2**63, 2**70, -1):
        payload = assert_error(client.post("/v1/submissions", json=body(sample_index=index), headers=auth), 422)
        assert payload["errors"][0]["loc"] == ["body", "sample_index"]


def test_sample_index_must_be_an_integer(client, auth):
    for value in ("false", "true", '"3"', "3.5"):
        text = json.dumps(body())[:-1] + f', "sample_index": {value}}}'
        payload = assert_error(post_json(client, auth, text), 422)
        assert payload["errors"][0]["loc"] == ["body", "sample_index"], value


def test_sample_index_as_an_integral_float_is_that_integer(client, auth):
    # JSON Schema's "integer" includes 3.0, and some JSON writers emit it; it is stored as 3.
    response = post_json(client, auth, json.dumps(body())[:-1] + ', "sample_index": 3.0}')
    assert response.status_code == 202, response.text
    assert client.get(response.headers["location"]).json()["sample_index"] == 3


def test_sample_index_in_the_query_of_a_text_body(client, auth):
    headers = {**auth, "Content-Type": "text/plain"}
    ok = client.post(f"/v1/submissions?task=kl_div&sample_index={2**40}", content=SOURCE.encode(), headers=headers)
    assert ok.status_code == 202 and client.get(ok.headers["location"]).json()["sample_index"] == 2**40
    for bad in ("false", str(2**63), "1.5"):
        assert_error(client.post(f"/v1/submissions?task=kl_div&sample_index={bad}", content=SOURCE.encode(),
                                 headers=headers), 422, "sample_index")


def test_non_finite_numbers_in_sampling_are_422(client, auth):
    for literal in ("NaN", "Infinity", "-Infinity", "1e999"):
        text = json.dumps(body())[:-1] + f', "sampling": {{"temperature": 0.7, "top_p": [1, {literal}]}}}}'
        payload = assert_error(post_json(client, auth, text), 422, "finite", "top_p")
        assert payload["errors"][0]["loc"] == ["body", "sampling"]
    assert client.get("/v1/submissions", headers=auth).json()["items"] == []  # nothing was stored


def test_integers_beyond_64_bits_in_sampling_are_422(client, auth):
    assert_error(client.post("/v1/submissions", json=body(sampling={"seed": 2**70}), headers=auth), 422, "64 bits")


def test_finite_sampling_is_stored_as_sent(client, auth):
    sampling = {"temperature": 0.7, "top_p": 0.95, "seed": 2**62, "stop": ["```"], "nested": {"a": [1, 2.5, None]}}
    response = client.post("/v1/submissions", json=body(sampling=sampling), headers=auth)
    assert response.status_code == 202, response.text
    assert client.get(response.headers["location"]).json()["sampling"] == sampling


# --- idempotency keys ----------------------------------------------------------------------------

def test_an_empty_idempotency_key_is_422_every_time(client, auth):
    for _ in range(2):
        payload = assert_error(client.post("/v1/submissions", json=body(idempotency_key=""), headers=auth), 422)
        assert payload["errors"][0]["loc"] == ["body", "idempotency_key"]
    header = client.post("/v1/submissions", json=body(), headers={**auth, "Idempotency-Key": ""})
    assert_error(header, 422, "idempotency-key")
    query = client.post("/v1/submissions?task=kl_div&idempotency_key=", content=SOURCE.encode(),
                        headers={**auth, "Content-Type": "text/plain"})
    assert_error(query, 422, "idempotency_key")


def test_the_idempotency_key_header_is_validated_like_the_field(client, auth):
    first = client.post("/v1/submissions", json=body(), headers={**auth, "Idempotency-Key": "run-1/0"})
    again = client.post("/v1/submissions", json=body(), headers={**auth, "Idempotency-Key": "run-1/0"})
    assert first.status_code == again.status_code == 202 and first.json()["id"] == again.json()["id"]
    assert again.json()["duplicate"] is True


# --- one error shape -----------------------------------------------------------------------------

def test_every_error_has_the_same_shape(client, auth):
    assert_error(client.post("/v1/submissions", json=body()), 401, "API key")
    assert_error(client.get("/v1/nothing-here"), 404)
    assert_error(client.put("/v1/tasks"), 405)
    assert_error(client.get("/v1/tasks/nope"), 404, "unknown task", "valid_task_ids")
    assert_error(client.post("/v1/submissions", json=body(task="nope"), headers=auth), 404, "kl_div")
    assert_error(client.post("/v1/submissions", content=b"x", headers={**auth, "Content-Type": "image/png"}), 415)
    assert_error(client.post("/v1/submissions", content=b"{", headers={**auth, "Content-Type": "application/json"}),
                 422, "json")
    assert_error(client.get("/v1/leaderboard/kl_div?limit=0"), 422, "limit")
    assert_error(client.get("/v1/submissions?cursor=nope", headers=auth), 404, "cursor")
    assert_error(client.get("/v1/keys", headers=auth), 401, "admin")
    assert client.post("/v1/submissions", json=body(idempotency_key="k"), headers=auth).status_code == 202
    assert_error(client.post("/v1/submissions", json=body(idempotency_key="k", source=SOURCE + "#"), headers=auth),
                 409, "different")


def test_database_away_is_503_with_retry_after():
    # Nothing listens on port 1: every query fails to connect, as when PostgreSQL is down.
    settings = Settings(database_url="postgresql+psycopg://postgres@127.0.0.1:1/none?connect_timeout=2",
                        admin_key=ADMIN_KEY)
    with TestClient(create_app(settings)) as client:
        response = client.get("/v1/submissions/abc")
        payload = assert_error(response, 503, "database")
        assert int(response.headers["retry-after"]) > 0 and payload["errors"] == []
        assert client.get("/v1/tasks").status_code == 200  # what needs no database still answers
