"""The per-key limits hold under concurrency: many requests of one key at once, over real HTTP, against two real
API processes (uvicorn) on one database, SQLite and PostgreSQL.

Before: one key, 600 POSTs at concurrency 60 were all admitted where the token bucket allows 328 (PostgreSQL,
two API processes) or 208 (SQLite): the bucket read its clock before its row lock. A queue quota of 10 admitted
38 of 60 concurrent POSTs: the count and the insert were two transactions. No worker runs here, so nothing
leaves the queue while the requests race: a quota of Q admits exactly Q.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest
from sqlalchemy import func, select

from service.db.models import Batch, Submission
from service.db.session import Database
from tests.service.conftest import CORRECT_KL_DIV, Proc, free_port, new_key, wait_api

SOURCE = CORRECT_KL_DIV.read_text()

pytestmark = pytest.mark.both_databases  # two API processes racing for one limit: each back end's locking


@pytest.fixture
def two_apis(spawn: Callable[..., Proc]) -> Callable[..., list[str]]:
    """Start two API processes on the test's database with these settings; returns their base URLs."""

    def start(**env: str) -> list[str]:
        bases = []
        for _ in range(2):
            port = str(free_port())
            proc = spawn("api", PORT=port, **env)
            bases.append((proc, f"http://127.0.0.1:{port}"))
        for proc, base in bases:
            wait_api(proc, base)
        return [base for _, base in bases]

    return start


def race(bases: list[str], key: str, requests: int, concurrency: int, post: Callable[..., httpx.Response]
         ) -> tuple[Counter, float]:
    """`requests` POSTs of one key from `concurrency` threads, alternating between the API processes; returns the
    status counts and the seconds from the first request sent to the last answer received."""
    headers = {"Authorization": f"Bearer {key}"}
    with httpx.Client(timeout=120, limits=httpx.Limits(max_connections=concurrency)) as http:
        started = time.monotonic()
        with ThreadPoolExecutor(concurrency) as pool:
            statuses = list(pool.map(lambda i: post(http, bases[i % len(bases)], headers, i).status_code,
                                     range(requests)))
        elapsed = time.monotonic() - started
    return Counter(statuses), elapsed


def submit(http: httpx.Client, base: str, headers: dict, i: int) -> httpx.Response:
    return http.post(f"{base}/v1/submissions", headers=headers, json={"task": "kl_div", "source": SOURCE,
                                                                      "sample_index": i})


def count(db: Database, table: type) -> int:
    with db.transaction(read_only=True) as s:
        return s.scalar(select(func.count()).select_from(table))


def test_the_token_bucket_holds_across_two_api_processes(db: Database, two_apis):
    burst, per_minute = 20, 600.0
    bases = two_apis(JUDGE_RATE_LIMIT_BURST=str(burst), JUDGE_RATE_LIMIT_PER_MINUTE=str(per_minute),
                     JUDGE_QUEUE_QUOTA="100000")
    key = new_key(db, "racer")
    statuses, elapsed = race(bases, key, requests=400, concurrency=60, post=submit)
    assert set(statuses) <= {202, 429}, statuses
    # The bucket's bound: the burst, plus what refills during the race (measured from outside it, so an upper
    # bound of the refill the server saw), plus one for a token that refilled at the edge.
    allowed = burst + per_minute / 60.0 * elapsed + 1
    assert burst <= statuses[202] <= allowed, (statuses, f"{elapsed:.1f} s", allowed)
    assert count(db, Submission) == statuses[202]


def test_the_queue_quota_holds_across_two_api_processes(db: Database, two_apis):
    quota = 10
    bases = two_apis(JUDGE_QUEUE_QUOTA=str(quota), JUDGE_RATE_LIMIT_BURST="100000",
                     JUDGE_RATE_LIMIT_PER_MINUTE="1000000")
    key = new_key(db, "racer")
    statuses, _ = race(bases, key, requests=60, concurrency=60, post=submit)
    assert statuses == Counter({202: quota, 429: 60 - quota})
    assert count(db, Submission) == quota


def test_the_batch_queue_quota_holds_across_two_api_processes(db: Database, two_apis):
    quota = 10

    def batch(http: httpx.Client, base: str, headers: dict, i: int) -> httpx.Response:
        # Distinct sources, so each batch queues one job of its own.
        return http.post(f"{base}/v1/batches", headers=headers,
                         json=[{"task": "kl_div", "source": f"{SOURCE}\n# sample {i}\n"}])

    bases = two_apis(JUDGE_BATCH_QUEUE_QUOTA=str(quota))
    key = new_key(db, "racer")
    statuses, _ = race(bases, key, requests=40, concurrency=40, post=batch)
    assert statuses == Counter({202: quota, 429: 40 - quota})
    assert count(db, Batch) == quota
