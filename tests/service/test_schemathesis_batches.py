"""Schemathesis over the batch routes with an API key, on batches that key owns, on SQLite and PostgreSQL.

test_schemathesis.py fuzzes every operation, POST /v1/batches and POST /v1/rewards with a key included, but a
generated batch id names no batch: there every case of GET /v1/batches/{batch_id}, its /results and /metrics and
POST .../cancel answered 404, so only the lookup was fuzzed. Here the key owns two batches: a JSONL batch (one
sample judged `correct`, one `incorrect`, one still queued, one a duplicate) and the batch a rewards call stored.
Each case names one of them in its path; schemathesis generates everything else (query, headers) in valid and
invalid forms and runs the same checks on every answer (no 5xx, the documented status, content type, headers and
body, valid data accepted, invalid data refused). Cancel comes last, so the reads see both a live batch and,
after it, a cancelled one (the second batch's reads run after the first batch is cancelled).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator

import pytest
import schemathesis
from fastapi.testclient import TestClient
from hypothesis import HealthCheck, given
from hypothesis import settings as hypothesis_settings
from hypothesis.errors import Unsatisfiable
from schemathesis import GenerationMode

from sandbox.verdict import Status
from service.core.config import Settings
from service.db.session import Database
from service.main import create_app
from service.queue import claims as q
from tests.service.conftest import ADMIN_KEY, new_key
from tests.service.test_batches import CORRECT, jsonl, post_batch, verdict
from tests.service.test_schemathesis import EXAMPLES


pytestmark = pytest.mark.slow  # fuzzing on both databases

@pytest.fixture
def fuzz_client(db_url: str) -> Iterator[TestClient]:
    settings = Settings(database_url=db_url, admin_key=ADMIN_KEY, rate_limit_per_minute=1e6,
                        rate_limit_burst=100_000, rewards_max_wait_s=0.2)  # no worker: rewards answer incomplete
    with TestClient(create_app(settings)) as client:
        yield client


def owned_batches(client: TestClient, db: Database, auth: dict[str, str]) -> dict[str, str]:
    """A JSONL batch with verdicts, a queued sample and a duplicate, and the batch a rewards call stored."""
    sources = [f"{CORRECT}\n# sample {i}\n" for i in range(3)]
    lines = [{"task": "kl_div", "source": s, "model": "m", "sample_index": i, "metadata": {"i": i}}
             for i, s in enumerate(sources)]
    answer = post_batch(client, auth, jsonl(*lines, {**lines[0], "sample_index": 3}), name="fuzzed")
    assert answer.status_code == 202, answer.text
    judged = q.claim(db, "fuzz-worker", 2, lease_s=60)
    for claim, status in zip(judged, (Status.CORRECT, Status.INCORRECT), strict=True):
        assert q.finish(db, claim.token, verdict("kl_div", status, eager=1.5, compile_=0.7),
                        "fuzz-worker", q.RetryPolicy()) == "verdict"
    rewards = client.post("/v1/rewards", headers=auth, json={"task": "kl_div", "model": "policy",
                                                             "completions": [f"```python\n{CORRECT}```"]})
    assert rewards.status_code == 200 and rewards.json()["batch_id"], rewards.text
    return {"batch": answer.json()["id"], "rewards": rewards.json()["batch_id"]}


def fuzz(operation, mode: GenerationMode, batch_id: str, auth: dict[str, str]) -> list[int]:  # noqa: ANN001
    """Run one operation on one batch in one generation mode; returns the status codes answered."""
    statuses: list[int] = []

    @given(case=operation.as_strategy(generation_mode=mode, path_parameters={"batch_id": batch_id}))
    @hypothesis_settings(max_examples=EXAMPLES, deadline=None, database=None, derandomize=True,
                         suppress_health_check=list(HealthCheck))
    def run(case) -> None:  # noqa: ANN001
        statuses.append(case.call_and_validate(headers=auth).status_code)

    try:
        run()
    except Unsatisfiable:  # nothing left to make invalid once the batch id is fixed (cancel, metrics)
        if mode is not GenerationMode.NEGATIVE:
            raise
    return statuses


def test_batch_routes_survive_fuzzing_on_batches_the_key_owns(fuzz_client: TestClient, db_url: str) -> None:
    db = Database(db_url)
    try:
        auth = {"Authorization": f"Bearer {new_key(db, 'fuzzer')}"}
        batches = owned_batches(fuzz_client, db, auth)
    finally:
        db.dispose()
    schema = schemathesis.openapi.from_asgi("/openapi.json", fuzz_client.app)
    operations = [result.ok() for result in schema.get_all_operations()]
    on_a_batch = [op for op in operations if "{batch_id}" in op.path]
    on_a_batch.sort(key=lambda op: op.method == "post")  # cancel last
    assert {f"{op.method.upper()} {op.path}" for op in on_a_batch} == {
        "GET /v1/batches/{batch_id}", "GET /v1/batches/{batch_id}/metrics", "GET /v1/batches/{batch_id}/results",
        "POST /v1/batches/{batch_id}/cancel"}

    findings, reached, total = {}, Counter(), Counter()
    for operation in on_a_batch:
        for kind, batch_id in batches.items():
            name = f"{operation.method.upper()} {operation.path} ({kind})"
            for mode in (GenerationMode.POSITIVE, GenerationMode.NEGATIVE):
                try:
                    statuses = fuzz(operation, mode, batch_id, auth)
                except Exception as exc:  # noqa: BLE001 -- a finding: collected, so one run reports them all
                    findings[f"{name} {mode.value}"] = str(exc)
                    continue
                total.update(statuses)
                if mode is GenerationMode.POSITIVE:
                    reached[name] = sum(200 <= s < 300 for s in statuses)
    print(f"schemathesis on owned batches ({db_url.split(':')[0]}): statuses {dict(sorted(total.items()))}, "
          f"2xx per operation {dict(reached)}")
    assert not findings, "\n\n".join(f"{name}\n{finding}" for name, finding in findings.items())
    # Every operation reached the batch it named (a 404 there would mean the fixed id was not used).
    assert len(reached) == 8 and all(n >= 1 for n in reached.values()), reached
    assert not [s for s in total if s >= 500] and total[404] == 0
