"""Wake-ups instead of polls (service/queue/wakeup.py), on SQLite and PostgreSQL: idle workers when jobs are
queued, and the requests waiting for a verdict (event streams, reward calls) when it is stored.

Listeners run in this process while submissions are committed or rolled back through the real crud functions;
a real worker process whose poll is 30 s must claim a new submission within seconds; and an event stream and a
reward call whose polls are 30 s must answer within seconds of their verdict's commit.
"""

from __future__ import annotations

import json
import socket
import threading
import time

import pytest
from fastapi.testclient import TestClient

from sandbox.verdict import Status
from service import crud
from service.api.schemas import SubmissionCreate
from service.batches.schemas import Sample
from service.batches.store import create_batch
from service.db.migrate import upgrade
from service.db.session import Database
from service.main import create_app
from service.queue import claims as q
from service.queue import wakeup
from service.queue.states import JobState
from tests.service.conftest import CORRECT_KL_DIV, new_key, wait_for
from tests.service.test_batches import verdict
from tests.service.test_worker import jobs, submit

SOURCE = CORRECT_KL_DIV.read_text()
HEARD_S = 10.0
"""How long a committed announcement may take to arrive (it takes milliseconds; the margin is for a loaded host)."""
QUIET_S = 1.0
"""How long a rolled-back transaction is watched for a wake-up that must not come."""


class Rollback(Exception):
    pass


@pytest.fixture
def listening(db_url: str):
    wake = threading.Event()
    listener = wakeup.Listener(db_url, "test-listener", wakeup.QUEUED, lambda _payload: wake.set())
    assert listener.ready.wait(HEARD_S), "the listener never became ready"
    yield wake
    listener.close()


def test_a_committed_submission_wakes_a_listener(db: Database, listening: threading.Event) -> None:
    submit(db)
    assert listening.wait(HEARD_S)


def test_a_rolled_back_submission_wakes_nobody(db: Database, listening: threading.Event) -> None:
    with pytest.raises(Rollback):
        with db.transaction() as session:
            key = crud.create_key(session, "alice")[0]
            crud.create_submission(session, key, SubmissionCreate(task="kl_div", source=SOURCE, model="m"))
            raise Rollback
    assert not listening.wait(QUIET_S)
    submit(db)  # the listener still hears the next one
    assert listening.wait(HEARD_S)


def test_a_batch_wakes_a_listener(db: Database, listening: threading.Event) -> None:
    with db.transaction() as session:
        key = crud.create_key(session, "alice")[0]
        create_batch(session, key, [(1, Sample(task="kl_div", source=SOURCE, model="m"))], name=None, tags=[])
    assert listening.wait(HEARD_S)


def test_a_dead_workers_socket_is_removed_and_the_live_one_still_hears(tmp_path) -> None:
    # SQLite only (PostgreSQL keeps no sockets), so on a database of its own rather than the two-backend `db`.
    url = f"sqlite:///{tmp_path / 'sockets.db'}"
    upgrade(url)
    database, wake = Database(url), threading.Event()
    listener = wakeup.Listener(url, "live", wakeup.QUEUED, lambda _payload: wake.set())
    try:
        assert listener.ready.wait(HEARD_S)
        stale = wakeup.wake_dir(url, wakeup.QUEUED) / "gone.sock"
        dead = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        dead.bind(str(stale))
        dead.close()  # bound, never unlinked: what a worker killed with SIGKILL leaves
        submit(database)
        assert wake.wait(HEARD_S)
        assert not stale.exists()
    finally:
        listener.close()
        database.dispose()


def test_an_idle_worker_claims_a_new_submission_long_before_its_poll(db: Database, spawn) -> None:
    worker = spawn("worker", JUDGE_POLL_S="30", JUDGE_MODE="compile-only", JUDGE_LOG_LEVEL="DEBUG")
    wait_for(lambda: "idle: next claim on a wake-up or in 30.0 s" in worker.output(), 120,
             "the worker to find the queue empty and wait for its 30 s poll")
    (sub_id,) = submit(db)
    wait_for(lambda: next(j.state for j in jobs(db) if j.submission_id == sub_id) is not JobState.QUEUED, HEARD_S,
             "the new submission to be claimed (only a wake-up can do it before the 30 s poll)")


# --- verdicts wake the requests waiting for them (service/api/verdict_waits.py) -------------------------------

SLOW_POLL_S = 30.0
"""The event stream's and the reward call's polls in these tests: only a wake-up answers within HEARD_S."""


@pytest.fixture
def slow_poll_client(settings):
    slow = settings.model_copy(update={"sse_poll_s": SLOW_POLL_S, "rewards_poll_s": SLOW_POLL_S})
    with TestClient(create_app(slow)) as test_client:
        yield test_client


def judge_queued(db: Database, n: int) -> float:
    """Claim `n` queued jobs and store a verdict for each, as a worker would; returns when the last committed."""
    claims = q.claim(db, "test-worker", n, lease_s=60)
    assert len(claims) == n
    for claim in claims:
        assert q.finish(db, claim.token, verdict(claim.task_id, Status.INCORRECT), "test-worker",
                        q.RetryPolicy()) == "verdict"
    return time.monotonic()


def test_an_event_stream_ends_with_the_verdict_as_soon_as_it_is_stored(db: Database, slow_poll_client) -> None:
    (sub_id,) = submit(db)
    events: list[tuple[float, str]] = []
    with slow_poll_client.stream("GET", f"/v1/submissions/{sub_id}/events") as stream:
        for line in stream.iter_lines():
            if line.startswith("data:"):
                events.append((time.monotonic(), json.loads(line[5:])["status"]))
                if len(events) == 1:  # the stream is now waiting, its next poll 30 s away
                    finished = judge_queued(db, 1)
    assert [status for _, status in events][-1] == "done"
    assert events[-1][0] - finished < HEARD_S


def test_a_reward_call_returns_as_soon_as_its_verdicts_are_stored(db: Database, slow_poll_client) -> None:
    key = new_key(db, "trainer")
    answer: dict[str, object] = {}

    def call() -> None:
        body = {"task": "kl_div", "deadline_s": 600, "completions": [SOURCE]}
        response = slow_poll_client.post("/v1/rewards", json=body, headers={"Authorization": f"Bearer {key}"})
        answer["at"], answer["response"] = time.monotonic(), response

    # A daemon: if the wake-up fails, the test fails without this thread (stuck on a closed client) holding exit.
    caller = threading.Thread(target=call, daemon=True)
    caller.start()
    wait_for(lambda: any(j.state is JobState.QUEUED for j in jobs(db)), HEARD_S, "the reward call's job")
    finished = judge_queued(db, 1)
    caller.join(HEARD_S)
    assert not caller.is_alive(), "the reward call still waits for its 30 s poll"
    response = answer["response"]
    assert response.status_code == 200, response.text
    assert response.json()["complete"] is True and response.json()["results"][0]["status"] == "incorrect"
    assert answer["at"] - finished < HEARD_S
