"""Idle workers wake when jobs are queued (service/queue/wakeup.py), on SQLite and PostgreSQL.

The unit tests listen in this process while submissions are committed or rolled back through the real crud
functions; the last one runs a real worker process whose poll is 30 s, so only a wake-up can explain its
claiming a new submission within seconds.
"""

from __future__ import annotations

import socket
import threading

import pytest

from service import crud
from service.api.schemas import SubmissionCreate
from service.batches.schemas import Sample
from service.batches.store import create_batch
from service.db.session import Database
from service.queue import wakeup
from service.queue.states import JobState
from tests.service.conftest import CORRECT_KL_DIV, wait_for
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
    listener = wakeup.Listener(db_url, "test-listener", wake)
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


def test_a_dead_workers_socket_is_removed_and_the_live_one_still_hears(db_url: str, db: Database,
                                                                         listening: threading.Event) -> None:
    directory = wakeup.wake_dir(db_url)
    if directory is None:
        assert db_url.startswith("postgresql")  # PostgreSQL keeps no sockets: nothing to clean
        return
    stale = directory / "gone.sock"
    dead = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    dead.bind(str(stale))
    dead.close()  # bound, never unlinked: what a worker killed with SIGKILL leaves
    submit(db)
    assert listening.wait(HEARD_S)
    assert not stale.exists()


def test_an_idle_worker_claims_a_new_submission_long_before_its_poll(db: Database, spawn) -> None:
    worker = spawn("worker", JUDGE_POLL_S="30", JUDGE_MODE="compile-only", JUDGE_LOG_LEVEL="DEBUG")
    wait_for(lambda: "idle: next claim on a wake-up or in 30.0 s" in worker.output(), 120,
             "the worker to find the queue empty and wait for its 30 s poll")
    (sub_id,) = submit(db)
    wait_for(lambda: next(j.state for j in jobs(db) if j.submission_id == sub_id) is not JobState.QUEUED, HEARD_S,
             "the new submission to be claimed (only a wake-up can do it before the 30 s poll)")
