"""Bad input to POST /v1/batches and POST /v1/rewards is a 4xx that says what to fix and stores nothing, on
SQLite and PostgreSQL alike, exactly as for POST /v1/submissions (one schema for a sample: SampleFields).

Each case here was a 500 before, or was stored and broke a later read: a line nested 100,000 deep
(RecursionError in json), a completion too deep for Python's parser (RecursionError in dedup), NUL characters
(PostgreSQL text cannot hold them; a NUL tag made every GET /v1/submissions?tag= of its submitter a 500), NaN
and infinities in JSON columns, `sample_index: true` stored as 1.
"""

from __future__ import annotations

import json

import pytest
from sqlalchemy import func, select

from service.api.schemas import SampleFields
from service.batches.schemas import Sample
from service.db.models import Batch, Submission
from tests.service.test_batches import CORRECT, jsonl, post_batch

NAN = "__NAN__"
"""Placeholder for a JSON literal json.dumps will not write (NaN, Infinity): see `raw`."""


def raw(obj: object, literal: str = "NaN") -> str:
    """JSON text of `obj` with the NAN placeholder replaced by a bare literal, as a client's JSON library may send."""
    return json.dumps(obj).replace(f'"{NAN}"', literal)


def sample(**fields: object) -> dict:
    return {"task": "kl_div", "source": CORRECT, **fields}


def stored(db) -> tuple[int, int]:  # noqa: ANN001
    with db.transaction(read_only=True) as s:
        return s.scalar(select(func.count()).select_from(Submission)), s.scalar(select(func.count()).select_from(Batch))


def refused_line(response, line: int, *words: str) -> str:  # noqa: ANN001
    """The 422 of an upload whose only sample is refused: the line is named, with a message naming the fix."""
    assert response.status_code == 422, response.text
    rejected = {e["line"]: e["error"] for e in response.json()["rejected"]}
    assert list(rejected) == [line], rejected
    for word in words:
        assert word.lower() in rejected[line].lower(), rejected[line]
    return rejected[line]


# --- one schema for a sample -----------------------------------------------------------------------

def test_every_entry_point_validates_a_sample_with_the_same_schema():
    assert issubclass(Sample, SampleFields)
    common = set(SampleFields.model_fields)
    assert common == {"task", "model", "sampling", "sample_index", "tags", "public", "profile"}
    inherited, declared = Sample.model_json_schema()["properties"], SampleFields.model_json_schema()["properties"]
    for name in common:
        assert inherited[name] == declared[name], name
        assert repr(Sample.model_fields[name]) == repr(SampleFields.model_fields[name]), name


BAD_FIELDS = [
    ("model", "a\x00b", "NUL"),
    ("task", "kl\x00div", "NUL"),
    ("tags", ["ok", "x\x00"], "NUL"),
    ("sampling", {"k\x00": 1}, "NUL"),
    ("sampling", {"k": ["\x00"]}, "NUL"),
    ("sample_index", True, "JSON integer"),
    ("sample_index", "3", "JSON integer"),
    ("sample_index", -1, "greater than or equal"),
    ("sample_index", 2**63, "less than or equal"),
    ("sampling", {"t": 2**64}, "64 bits"),
    ("public", 1, "valid boolean"),
    ("public", "true", "valid boolean"),
]


def test_a_bad_common_field_is_refused_alike_by_submissions_and_batches(client, auth, db):
    for field, value, word in BAD_FIELDS:
        single = client.post("/v1/submissions", json=sample(**{field: value}), headers=auth)
        assert single.status_code == 422, (field, value, single.text)
        message = single.json()["errors"][0]["msg"].removeprefix("Value error, ")
        assert word.lower() in message.lower(), (field, message)
        batch = post_batch(client, auth, jsonl(sample(**{field: value})))
        assert message in refused_line(batch, 1, field), (field, value)
    assert stored(db) == (0, 0)


# --- NUL, NaN, non-integers in batch lines ----------------------------------------------------------

@pytest.mark.parametrize("field", ["source", "completion", "model", "parent_id"])
def test_nul_in_a_batch_text_field_is_refused(client, auth, db, field):
    line = {"task": "kl_div", "completion": CORRECT} if field == "completion" else sample()
    line[field] = line.get(field, "a") + "\x00"
    refused_line(post_batch(client, auth, jsonl(line)), 1, field, "NUL", "remove it")
    assert stored(db) == (0, 0)


def test_nul_in_tags_is_refused_and_a_tag_listing_keeps_working(client, auth, db):
    refused_line(post_batch(client, auth, jsonl(sample(tags=["run\x00"]))), 1, "tags.0", "NUL")
    whole = client.post("/v1/batches", json={"name": "n", "tags": ["a\x00"], "samples": [sample()]}, headers=auth)
    assert whole.status_code == 422 and "tags.0" in whole.json()["detail"] and "NUL" in whole.json()["detail"]
    named = client.post("/v1/batches", json={"name": "a\x00", "samples": [sample()]}, headers=auth)
    assert named.status_code == 422 and "name" in named.json()["detail"] and "NUL" in named.json()["detail"]
    query = post_batch(client, auth, jsonl(sample()), name="a\x00")
    assert query.status_code == 422 and "NUL" in query.json()["detail"]
    assert stored(db) == (0, 0)
    # Beside a good line, the bad one is refused and the good one stored; the listing by tag still answers.
    mixed = post_batch(client, auth, jsonl(sample(tags=["run"]), sample(tags=["run\x00"], model="m2")))
    assert mixed.status_code == 202 and [e["line"] for e in mixed.json()["rejected"]] == [2]
    listing = client.get("/v1/submissions", params={"tag": "run"}, headers=auth)
    assert listing.status_code == 200 and len(listing.json()["items"]) == 1
    assert stored(db) == (1, 1)


@pytest.mark.parametrize("literal", ["NaN", "Infinity", "-Infinity", "1e999"])
@pytest.mark.parametrize("field", ["metadata", "sampling"])
def test_non_finite_numbers_in_batch_json_are_refused(client, auth, db, field, literal):
    line = raw(sample(**{field: {"x": {"y": NAN}}}), literal)
    refused_line(post_batch(client, auth, line + "\n"), 1, f"{field}", "x.y", "only finite numbers")
    as_list = client.post("/v1/batches", content=raw([sample(**{field: {"x": NAN}})], literal),
                          headers={**auth, "Content-Type": "application/json"})
    refused_line(as_list, 1, "only finite numbers")
    assert stored(db) == (0, 0)


def test_sample_index_and_turn_must_be_json_integers_in_a_batch(client, auth, db):
    for field in ("sample_index", "turn"):
        for value in (True, False, "3"):
            refused_line(post_batch(client, auth, jsonl(sample(**{field: value}))), 1, field, "JSON integer")
    assert stored(db) == (0, 0)
    ok = post_batch(client, auth, raw(sample(sample_index=NAN, turn=NAN), "3.0") + "\n")
    assert ok.status_code == 202, ok.text
    with db.transaction(read_only=True) as s:
        row = s.scalars(select(Submission)).one()
    assert (row.sample_index, row.turn) == (3, 3)


def test_unpaired_surrogates_deep_metadata_and_huge_integers_are_refused(client, auth, db):
    # Python's json reads these; pydantic's (POST /v1/submissions) refuses them while parsing.
    surrogate = '{"task": "kl_div", "source": "x = 1", "tags": ["\\ud800"]}\n'
    refused_line(post_batch(client, auth, surrogate), 1, "tags.0", "unpaired surrogate")
    deep = sample(metadata=json.loads("[" * 40 + "]" * 40))
    assert post_batch(client, auth, jsonl(deep)).status_code == 422  # metadata must be an object
    deep = sample(metadata={"a": json.loads("[" * 40 + "]" * 40)})
    refused_line(post_batch(client, auth, jsonl(deep)), 1, "metadata", "more than 32 deep", "flatten")
    huge = '{"task": "kl_div", "source": "x = 1", "metadata": {"n": ' + "9" * 5000 + "}}\n"
    refused_line(post_batch(client, auth, huge), 1, "4,300 digits", "as a string")
    assert stored(db) == (0, 0)


# --- depth: json and Python's parser -----------------------------------------------------------------

def test_a_line_nested_100000_deep_is_a_422_naming_the_line(client, auth, db):
    deep = '{"task": "kl_div", "source": "x", "metadata": ' + "[" * 100_000 + "]" * 100_000 + "}"
    refused_line(post_batch(client, auth, "\n" + deep + "\n"), 2, "the line nests", "deeper")
    mixed = post_batch(client, auth, jsonl(sample(), deep))
    assert mixed.status_code == 202 and mixed.json()["rejected"][0]["line"] == 2
    assert stored(db) == (1, 1)


def test_an_upload_with_no_sample_at_all_says_what_a_sample_is(client, auth, db):
    for body, kind in (("", "application/x-ndjson"), ("\n\n", "application/x-ndjson"), ("[]", "application/json")):
        r = post_batch(client, auth, body, headers={"Content-Type": kind})
        assert r.status_code == 422, r.text
        assert r.json()["rejected"] == [] and "fix the lines listed" not in r.json()["detail"], r.json()
        assert "no samples" in r.json()["detail"] and '"task"' in r.json()["detail"], r.json()["detail"]
    assert stored(db) == (0, 0)


def test_a_parent_id_naming_no_submission_is_a_refused_line_even_when_empty(client, auth, db):
    # An empty parent_id was taken for "none" by the existence check and reached the foreign key: a 500 on SQLite
    # (found by schemathesis).
    for parent in ("", "nope"):
        refused_line(post_batch(client, auth, jsonl(sample(parent_id=parent))), 1, "parent_id", "is not a submission")
    assert stored(db) == (0, 0)


def test_a_json_body_nested_100000_deep_is_a_422_saying_where(client, auth, db):
    for body in ("[" * 100_000 + "]" * 100_000, '{"samples": [' + "{\"a\": " * 100_000 + "1" + "}" * 100_000 + "]}"):
        r = client.post("/v1/batches", content=body, headers={**auth, "Content-Type": "application/json"})
        assert r.status_code == 422, r.text[:300]
        assert "nests" in r.json()["detail"] and "line 1 column" in r.json()["detail"], r.json()["detail"]
    assert stored(db) == (0, 0)


def test_a_completion_too_deep_for_the_python_parser_is_accepted_and_deduplicated_by_its_text(client, auth, db):
    deep = "x = " + "+".join(["1"] * 20_000) + "\n"
    r = post_batch(client, auth, jsonl(sample(source=deep), {"task": "kl_div", "completion": deep}, sample()))
    assert r.status_code == 202, r.text
    assert (r.json()["accepted"], r.json()["duplicates"]) == (3, 1)  # the same text: judged once
    assert stored(db) == (3, 1)


# --- rewards -------------------------------------------------------------------------------------------

def rewards(client, auth, body: dict | str):  # noqa: ANN001, ANN201
    content = body if isinstance(body, str) else json.dumps(body)
    return client.post("/v1/rewards", content=content, headers={**auth, "Content-Type": "application/json"})


def test_bad_rewards_fields_are_422_and_store_nothing(client, auth, db):
    base = {"task": "kl_div", "deadline_s": 0.1, "completions": [CORRECT]}
    for field, value, words in (("task", "kl\x00div", ("task", "NUL")), ("model", "m\x00", ("model", "NUL")),
                                ("name", "n\x00", ("name", "NUL"))):
        r = rewards(client, auth, {**base, field: value})
        assert r.status_code == 422, (field, r.text)
        assert all(w in r.json()["detail"] for w in words), r.json()["detail"]
    for literal in ("NaN", "Infinity"):
        r = rewards(client, auth, raw({**base, "reward": {"correct": NAN}}, literal))
        assert r.status_code == 422 and "reward.correct" in r.json()["detail"], r.text
        assert "finite" in r.json()["detail"], r.json()["detail"]
        r = rewards(client, auth, raw({**base, "deadline_s": NAN}, literal))
        assert r.status_code == 422 and "deadline_s" in r.json()["detail"], r.text
    r = rewards(client, auth, '{"completions": ' + "[" * 100_000 + "]" * 100_000 + "}")
    assert r.status_code == 422 and "recursion" in json.dumps(r.json()), r.text[:300]
    assert stored(db) == (0, 0)


def test_bad_rewards_items_are_refused_with_the_reason_and_not_stored(client, auth, db):
    items = [CORRECT + "\x00", {"completion": CORRECT, "metadata": {"x": NAN}},
             {"completion": CORRECT, "tags": ["\x00"]}, {"completion": CORRECT, "sample_index": True}]
    r = rewards(client, auth, raw({"task": "kl_div", "deadline_s": 0.1, "completions": items}))
    assert r.status_code == 200, r.text
    out = r.json()
    assert out["batch_id"] is None
    reasons = [item["diagnosis"] for item in out["results"]]
    assert all(item["reward"] == 0.0 and item["submission_id"] is None for item in out["results"])
    assert "NUL" in reasons[0] and "only finite numbers" in reasons[1] and "NUL" in reasons[2]
    assert "JSON integer" in reasons[3]
    assert stored(db) == (0, 0)
