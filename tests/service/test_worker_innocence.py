"""A live worker is never mistaken for a dead one: its own held jobs are not reclaimed by its own claims after a
database outage longer than the lease, and one parent death is one stop signal, however many notices it sends.
In-process workers on both databases; leases expired by writing their timestamps, signals by calling the handler."""

from __future__ import annotations

import os
import signal

import pytest
from sqlalchemy import select

from service.db.models import Job, JobAttempt
from service.db.session import Database
from service.queue.states import JobState
from service.worker import lifeline
from service.worker.judging import CompileOnlyJudge, judge_config
from service.worker.runner import Worker

from .test_queue import enqueue, expire_leases, run_it


@pytest.fixture
def worker(db: Database, settings) -> Worker:  # noqa: ANN001
    return Worker(db, settings, CompileOnlyJudge(judge_config(settings)), ["cpu"], worker_id="live")


def test_a_worker_does_not_reclaim_its_own_running_job_after_a_long_outage(db: Database, worker: Worker) -> None:
    (sub,) = enqueue(db, 1)
    (claim,) = worker._claim(1)
    worker._start(claim)  # held, waiting for a compile thread (none runs here)
    run_it(db, claim)
    expire_leases(db)  # the database was away longer than the lease: no heartbeat reached it
    assert worker._claim(5) == []
    with db.transaction(read_only=True) as s:
        job = s.scalars(select(Job).where(Job.submission_id == sub)).one()
        attempts = s.scalars(select(JobAttempt.outcome)).all()
    assert job.state is JobState.RUNNING and job.crashes == 0 and job.claim_token == claim.token
    assert attempts == [None] and claim.token in worker.held


def test_a_repeated_notice_of_the_parents_death_is_not_a_second_signal(db: Database, worker: Worker) -> None:
    """`serve` SIGKILLed: the kernel's PDEATHSIG may come twice (once per reparenting). The second must not make
    the worker abandon the jobs it is finishing (that path releases everything and exits the process)."""
    enqueue(db, 1)
    (claim,) = worker._claim(1)
    worker._start(claim)
    worker.parent = os.getppid() + 10**7  # an expected parent that is not ours: it died, we were reparented
    worker.on_signal(signal.SIGTERM)
    worker.on_signal(signal.SIGTERM)  # an _abandon here would os._exit this test process
    assert worker.stopping.is_set() and claim.token in worker.held
    with db.transaction(read_only=True) as s:
        assert s.scalars(select(Job.state)).one() is JobState.COMPILING  # not released


def test_the_first_signal_stops_gracefully_and_keeps_the_jobs(db: Database, worker: Worker) -> None:
    enqueue(db, 1)
    (claim,) = worker._claim(1)
    worker._start(claim)
    worker.parent = os.getppid()  # the parent lives: a signal is an operator's
    assert not worker.stopping.is_set()
    worker.on_signal(signal.SIGTERM)
    assert worker.stopping.is_set() and claim.token in worker.held


def test_a_notice_before_the_last_hand_over_is_not_a_second_signal(db: Database, worker: Worker,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """`serve` SIGKILLed with several threads: the kernel sends PDEATHSIG at each hand-over between its dying
    threads, while getppid() still names `serve`, and only the last hand-over gives the worker to init. The
    second notice came before that in a drill (tests/service/test_drills.py) and made the worker abandon its job.
    Here the parent is seen alive at the second notice and gone a few checks later."""
    enqueue(db, 1)
    (claim,) = worker._claim(1)
    worker._start(claim)
    worker.parent = os.getppid()
    checks = iter([False, False, False])  # three looks at a parent still there, then the hand-over to init

    monkeypatch.setattr(lifeline, "orphaned", lambda parent: next(checks, True))
    monkeypatch.setattr(worker, "_abandon", lambda: pytest.fail("one death, taken for a second signal"))
    worker.on_signal(signal.SIGTERM)
    worker.on_signal(signal.SIGTERM)
    assert worker.stopping.is_set() and claim.token in worker.held
    assert next(checks, "spent") == "spent"  # the second notice waited for the hand-over
    with db.transaction(read_only=True) as s:
        assert s.scalars(select(Job.state)).one() is JobState.COMPILING  # not released


def test_a_second_signal_while_the_parent_lives_releases_everything(db: Database, worker: Worker,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """An operator's second SIGTERM (the parent alive throughout `lifeline.DEATH_SETTLE_S`) still abandons."""
    enqueue(db, 1)
    (claim,) = worker._claim(1)
    worker._start(claim)
    worker.parent = os.getppid()  # this test process's parent: alive throughout
    monkeypatch.setattr(lifeline, "DEATH_SETTLE_S", 0.05)
    abandoned = []
    monkeypatch.setattr(worker, "_abandon", lambda: abandoned.append(True))
    worker.on_signal(signal.SIGTERM)
    assert not abandoned
    worker.on_signal(signal.SIGTERM)
    assert abandoned == [True]
