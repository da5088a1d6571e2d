"""Property-based fuzzing of every operation in the OpenAPI document, on SQLite and PostgreSQL.

schemathesis generates requests from the document (valid ones, and invalid ones for each field), sends them to
the app in-process (ASGI, no server) with a real API key, and runs its checks on every answer: no 5xx, the
status code, content type, headers and body declared for it, valid data accepted, invalid data refused, and
routes that need a key refusing a request without one. Any finding fails the test with a curl line to replay.

Budget: JUDGE_FUZZ_EXAMPLES examples per operation and generation mode (default 8: about 240 cases per
database, under a minute each on two cores, to keep CI under its 40 minutes); raise it for a deeper local run,
e.g. JUDGE_FUZZ_EXAMPLES=200.
"""

from __future__ import annotations

import os
import time
from collections import Counter
from collections.abc import Iterator

import pytest
import schemathesis
from fastapi import FastAPI
from fastapi.testclient import TestClient
from hypothesis import HealthCheck, given
from hypothesis.errors import Unsatisfiable
from hypothesis import settings as hypothesis_settings
from schemathesis import GenerationMode
from schemathesis.checks import positive_data_acceptance
from schemathesis.core.failures import FailureGroup

from service.core.config import Settings
from service.db.session import Database
from service.main import create_app
from tests.service.conftest import ADMIN_KEY, new_key

pytestmark = pytest.mark.slow  # minutes of fuzzing on both databases

EXAMPLES = int(os.environ.get("JUDGE_FUZZ_EXAMPLES", "8"))
ADMIN_PATHS = ("/v1/keys", "/v1/admin")
"""Operations that take the admin key instead of an API key."""
PENDING: dict[str, str] = {}
"""Operations with a known finding that their owner is fixing (name -> what schemathesis found). Listed ones are
still fuzzed and reported; only their findings do not fail the run. Empty is the goal."""

NO_POSITIVE_ACCEPTANCE = {
    "POST /v1/batches": "a batch is admitted line by line: a JSONL body is only `string` to OpenAPI, and a line "
                        "the schema allows can still be refused on what no schema states (a task id known at run "
                        "time, a parent_id that must exist); an upload with no good line is the documented 422. "
                        "tests/service/test_batches.py asserts that good lines are accepted.",
}
"""Operations where `positive_data_acceptance` is not checked, with why. Every other check still runs."""

NEGATIVE_ONLY: dict[str, str] = {}
"""Operations fuzzed with invalid requests only, with why."""


@pytest.fixture
def fuzz_app(db_url: str) -> Iterator[FastAPI]:
    settings = Settings(database_url=db_url, admin_key=ADMIN_KEY, rate_limit_per_minute=1e6,
                        rate_limit_burst=100_000, queue_quota=100_000, sse_max_s=0, sse_poll_s=0.01,
                        rewards_max_wait_s=0.2)  # no worker here: a valid rewards call answers complete=false
    app = create_app(settings)
    with TestClient(app):  # runs the lifespan, as a server would
        yield app


def run_operation(operation, mode: GenerationMode, headers: dict[str, str], calls: list[int],  # noqa: ANN001
                  excluded: list) -> None:  # noqa: ANN001
    # The task is fixed in the query: the text form of POST /v1/submissions needs one there, and schemathesis
    # cannot express "required for one media type only". Every other part is generated.
    query = {"task": "kl_div"} if operation.path == "/v1/submissions" and operation.method == "post" else None

    @given(case=operation.as_strategy(generation_mode=mode, query=query))
    @hypothesis_settings(max_examples=EXAMPLES, deadline=None, database=None, derandomize=True,
                         suppress_health_check=list(HealthCheck))
    def fuzz(case) -> None:  # noqa: ANN001
        calls.append(case.call_and_validate(headers=headers, excluded_checks=excluded).status_code)

    try:
        fuzz()
    except Unsatisfiable:
        # An operation with nothing to get wrong (no parameter, no body) has no invalid request to generate.
        if mode is not GenerationMode.NEGATIVE:
            raise


def test_every_operation_survives_fuzzing(fuzz_app: FastAPI, db_url: str) -> None:
    db = Database(db_url)
    try:
        user_key = new_key(db, "fuzzer")
    finally:
        db.dispose()
    schema = schemathesis.openapi.from_asgi("/openapi.json", fuzz_app)
    statuses, operations, findings = [], 0, {}
    for result in schema.get_all_operations():
        operation = result.ok()
        name = f"{operation.method.upper()} {operation.path}"
        token = ADMIN_KEY if operation.path.startswith(ADMIN_PATHS) else user_key
        started = time.monotonic()
        excluded = [positive_data_acceptance] if name in NO_POSITIVE_ACCEPTANCE else []
        modes = (GenerationMode.NEGATIVE,) if name in NEGATIVE_ONLY else (GenerationMode.POSITIVE,
                                                                           GenerationMode.NEGATIVE)
        for mode in modes:
            try:
                run_operation(operation, mode, {"Authorization": f"Bearer {token}"}, statuses, excluded)
            except (Exception, FailureGroup) as exc:  # noqa: BLE001 -- a finding: collected, so one run reports all
                findings[name] = f"{mode.value}: {exc}"
        operations += 1
        print(f"  {name}: {time.monotonic() - started:.1f} s")
    print(f"schemathesis: {len(statuses)} cases over {operations} operations on {db_url.split(':')[0]}, "
          f"statuses {dict(sorted(Counter(statuses).items()))}, {len(findings)} operations with findings")
    unexpected = {name: finding for name, finding in findings.items() if name not in PENDING}
    assert not unexpected, "\n\n".join(f"{name}\n{finding}" for name, finding in unexpected.items())
    assert operations >= 12 and len(statuses) >= operations * EXAMPLES
    assert not [s for s in statuses if s >= 500]
    assert statuses.count(202) >= EXAMPLES // 2  # valid submissions reached the database, not only the validators
