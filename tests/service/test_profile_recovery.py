"""Profiles left pending by a worker that stopped: the lease a worker takes, an idle worker taking them up, the
bound on attempts. The rules on SQLite and PostgreSQL (service/profiles/recovery.py), then a real worker taking
one up end to end.
"""

from __future__ import annotations

import datetime as dt

from sqlalchemy import update

from sandbox.verdict import Status, Verdict
import pytest

from service.client import JudgeClient
from service.client.errors import WaitTimeout
from service.db.models import ProfileRow, VerdictRow, utcnow
from service.profiles import recovery, store
from service.queue import claims as q
from service.queue.states import Outcome
from tests.service.conftest import CORRECT_KL_DIV

CORRECT = CORRECT_KL_DIV.read_text()
JUDGE_S = 300


def _judged(client, auth, db, status: Status = Status.CORRECT, *, verdict_age_s: float = 3600) -> str:
    """A submission with its verdict stored and a profile pending, as a worker that stopped before profiling
    leaves it: the verdict written through the queue's own `finish`, then dated `verdict_age_s` back."""
    response = client.post("/v1/submissions", json={"task": "kl_div", "source": CORRECT, "profile": True},
                           headers=auth)
    assert response.status_code == 202, response.text
    sub_id = response.json()["id"]
    (claim,) = q.claim(db, "judge-a", 1, lease_s=60)
    verdict = Verdict(status=status, task="kl_div", device="cuda:0", source_sha256="0" * 64,
                      diagnosis="stored by a worker that then stopped")
    assert q.finish(db, claim.token, verdict, "judge-a", q.RetryPolicy(3, 1.0, 3), final=True) is Outcome.VERDICT
    with db.transaction() as session:
        session.execute(update(VerdictRow).where(VerdictRow.submission_id == sub_id)
                        .values(created_at=utcnow() - dt.timedelta(seconds=verdict_age_s)))
    return sub_id


def _row(db, sub_id: str) -> ProfileRow:
    with db.transaction(read_only=True) as session:
        row = session.get(ProfileRow, session.scalar(
            ProfileRow.__table__.select().with_only_columns(ProfileRow.id).where(ProfileRow.submission_id == sub_id)))
        session.expunge(row)
        return row


def test_one_worker_at_a_time_holds_a_profile_and_a_run_out_lease_frees_it(client, auth, db):
    sub_id = _judged(client, auth, db)
    with db.transaction() as session:
        assert recovery.take(session, sub_id, "judge-a")
    with db.transaction() as session:
        assert not recovery.take(session, sub_id, "judge-b")  # judge-a holds it
        assert recovery.take_orphan(session, "judge-b", unclaimed_after_s=0) is None
    row = _row(db, sub_id)
    assert (row.worker_id, row.attempts) == ("judge-a", 1) and row.lease_until is not None

    with db.transaction() as session:  # judge-a died while profiling: its lease runs out
        session.execute(update(ProfileRow).where(ProfileRow.submission_id == sub_id)
                        .values(lease_until=utcnow() - dt.timedelta(seconds=1)))
    with db.transaction() as session:
        orphan = recovery.take_orphan(session, "judge-b", unclaimed_after_s=3600)
    assert orphan is not None and (orphan.submission_id, orphan.task_id, orphan.source) == (sub_id, "kl_div", CORRECT)
    assert orphan.verdict is not None and orphan.verdict.diagnosis == "stored by a worker that then stopped"
    assert (_row(db, sub_id).worker_id, _row(db, sub_id).attempts) == ("judge-b", 2)


def test_a_profile_nobody_took_is_taken_up_only_after_the_grace_after_its_verdict(client, auth, db):
    fresh = _judged(client, auth, db, verdict_age_s=0)
    with db.transaction() as session:  # its own worker is still expected to take it
        assert recovery.take_orphan(session, "judge-b", unclaimed_after_s=60) is None
    with db.transaction() as session:
        orphan = recovery.take_orphan(session, "judge-b", unclaimed_after_s=0)
    assert orphan is not None and orphan.submission_id == fresh


def test_a_profile_taken_too_often_or_with_nothing_to_profile_ends_unavailable(client, auth, db):
    lost = _judged(client, auth, db)
    broken = _judged(client, auth, db, Status.RUNTIME_ERROR)
    with db.transaction() as session:
        session.execute(update(ProfileRow).where(ProfileRow.submission_id == lost)
                        .values(attempts=recovery.ATTEMPTS, lease_until=utcnow() - dt.timedelta(seconds=1)))
    with db.transaction() as session:
        assert recovery.take_orphan(session, "judge-b", unclaimed_after_s=0) is None
    lost_row, broken_row = _row(db, lost), _row(db, broken)
    assert lost_row.status == "unavailable" and f"started {recovery.ATTEMPTS} times" in lost_row.profile["reason"]
    assert broken_row.status == "unavailable" and "verdict: runtime_error" in broken_row.profile["reason"]
    with db.transaction() as session:
        assert not store.is_pending(session, lost) and not store.is_pending(session, broken)


def test_a_profile_given_back_by_a_stopping_worker_is_free_and_not_counted(client, auth, db):
    sub_id = _judged(client, auth, db)
    with db.transaction() as session:
        orphan = recovery.take_orphan(session, "judge-b", unclaimed_after_s=0)
    assert orphan is not None and _row(db, sub_id).attempts == 1
    with db.transaction() as session:
        recovery.give_back(session, sub_id, "someone-else")  # not theirs: nothing changes
    assert _row(db, sub_id).lease_until is not None
    with db.transaction() as session:
        recovery.give_back(session, sub_id, "judge-b")
    row = _row(db, sub_id)
    assert row.lease_until is None and row.attempts == 0
    with db.transaction() as session:
        assert recovery.take(session, sub_id, "judge-c")


def test_a_real_worker_takes_up_a_profile_its_judging_worker_left(client, auth, db, spawn, live_api, api_key):
    """The judging worker stopped between the verdict and the profile; a real CPU worker, idle, takes the profile
    up, builds the candidate in its compile pool and runs the profiler on its executor (on a CPU host the judge
    answers "not available on this host", which is what a taken-up profile records here)."""
    sub_id = _judged(client, auth, db)
    worker = spawn("worker", JUDGE_PROFILE_UNCLAIMED_AFTER_S="0")
    _, base = live_api()
    with JudgeClient(base, api_key) as judge:
        try:
            profile = judge.wait_profile(sub_id, timeout=JUDGE_S)
        except WaitTimeout:
            pytest.fail(f"not taken up; the worker's log:\n{worker.output()[-4000:]}")
    assert profile.status == "unavailable" and profile.reason.startswith("not available on this host")
    row = _row(db, sub_id)
    assert row.worker_id not in (None, "judge-a") and row.attempts == 1
