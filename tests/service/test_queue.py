"""The queue's guarantees, on SQLite and PostgreSQL: atomic claims, leases, exactly-once verdicts,
crash loops, system_error retries with backoff, release on shutdown."""

from __future__ import annotations

import datetime as dt
import threading

from sqlalchemy import func, select, update

from sandbox.verdict import Status, Verdict
from service import crud
from service.api.schemas import SubmissionCreate
from service.db.models import Job, JobAttempt, VerdictRow, utcnow
from service.db.session import Database
from service.queue import claims as q
from service.queue.states import JobState


def enqueue(db: Database, n: int) -> list[str]:
    with db.transaction() as session:
        key = crud.create_key(session, "alice")[0]
        return [crud.create_submission(session, key, SubmissionCreate(task="kl_div", source=f"# {i}\n")
                                       ).submission.id for i in range(n)]


def verdict(status: Status = Status.CORRECT, diagnosis: str = "ok") -> Verdict:
    return Verdict(status=status, diagnosis=diagnosis, task="kl_div", device="cpu", source_sha256="x")


def expire_leases(db: Database) -> None:
    with db.transaction() as s:
        s.execute(update(Job).where(Job.lease_expires_at.is_not(None))
                  .values(lease_expires_at=utcnow() - dt.timedelta(seconds=1)))


def job(db: Database, sub_id: str) -> Job:
    with db.transaction(read_only=True) as s:
        return s.scalars(select(Job).where(Job.submission_id == sub_id)).one()


def verdict_count(db: Database) -> int:
    with db.transaction(read_only=True) as s:
        return s.scalar(select(func.count()).select_from(VerdictRow))


def test_claims_are_fifo_and_never_shared(db):
    ids = enqueue(db, 5)
    first = q.claim(db, "a", 2, 60)
    second = q.claim(db, "b", 10, 60)
    assert [c.submission_id for c in first] == ids[:2]
    assert [c.submission_id for c in second] == ids[2:]
    assert q.claim(db, "c", 10, 60) == []


def test_concurrent_claimers_in_threads_split_the_queue(db):
    enqueue(db, 60)
    got: dict[str, list[int]] = {}

    def run(name: str) -> None:
        mine = got.setdefault(name, [])
        while batch := q.claim(db, name, 3, 60):
            mine.extend(c.job_id for c in batch)

    threads = [threading.Thread(target=run, args=(f"w{i}",)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    everything = [j for ids in got.values() for j in ids]
    assert sorted(everything) == list(range(1, 61))  # none lost, none claimed twice


def test_expired_lease_is_reclaimed_and_the_late_worker_cannot_record(db):
    enqueue(db, 1)
    (slow,) = q.claim(db, "slow", 1, 60)
    assert q.advance(db, slow.token, JobState.COMPILED) and q.advance(db, slow.token, JobState.RUNNING)
    expire_leases(db)
    (fast,) = q.claim(db, "fast", 1, 60)
    assert fast.job_id == slow.job_id and fast.token != slow.token and fast.crashes == 1
    assert q.heartbeat(db, [slow.token, fast.token], 60) == {slow.token}
    assert q.advance(db, slow.token, JobState.RUNNING) is False
    assert q.finish(db, fast.token, verdict(diagnosis="fast"), "fast", q.RetryPolicy()) == "verdict"
    assert q.finish(db, slow.token, verdict(diagnosis="slow"), "slow", q.RetryPolicy()) == "lost"
    assert verdict_count(db) == 1
    with db.transaction(read_only=True) as s:
        assert s.scalar(select(VerdictRow.diagnosis)) == "fast"
        outcomes = s.scalars(select(JobAttempt.outcome).order_by(JobAttempt.id)).all()
    assert outcomes == ["crashed", "verdict"]


def test_racing_finishers_record_exactly_one_verdict(db):
    (sub,) = enqueue(db, 1)
    (claim,) = q.claim(db, "w", 1, 60)
    barrier = threading.Barrier(8)
    results = []

    def finish() -> None:
        barrier.wait()
        results.append(q.finish(db, claim.token, verdict(), "w", q.RetryPolicy()))

    threads = [threading.Thread(target=finish) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(results) == ["lost"] * 7 + ["verdict"]
    assert verdict_count(db) == 1 and job(db, sub).state is JobState.DONE


def test_heartbeat_keeps_a_job_from_being_reclaimed(db):
    enqueue(db, 1)
    (claim,) = q.claim(db, "w", 1, 60)
    expire_leases(db)
    assert q.heartbeat(db, [claim.token], 60) == set()
    assert q.claim(db, "other", 1, 60) == []


def run_it(db: Database, claim: q.Claim) -> None:
    assert q.advance(db, claim.token, JobState.COMPILED) and q.advance(db, claim.token, JobState.RUNNING)


def test_crash_count_reaches_the_limit(db):
    enqueue(db, 1)
    run_it(db, q.claim(db, "w1", 1, 60)[0])
    expire_leases(db)
    run_it(db, q.claim(db, "w2", 1, 60)[0])
    expire_leases(db)
    (third,) = q.claim(db, "w3", 1, 60)
    assert third.crashes == 2 and q.RetryPolicy().crash_loop(third.crashes)


def test_a_worker_death_before_running_is_not_blamed_on_the_candidate(db):
    """Issue 11 drill: two correct candidates were stored as crash loops because their workers were
    killed while the jobs sat compiled. Only a death while `running` counts."""
    (sub,) = enqueue(db, 1)
    for worker, state in (("w1", None), ("w2", JobState.COMPILED), ("w3", JobState.COMPILED)):
        (claim,) = q.claim(db, worker, 1, 60)
        assert claim.crashes == 0
        if state is not None:
            assert q.advance(db, claim.token, state)
        expire_leases(db)
    (last,) = q.claim(db, "w4", 1, 60)
    assert last.crashes == 0 and job(db, sub).crashes == 0
    with db.transaction(read_only=True) as s:
        outcomes = s.scalars(select(JobAttempt.outcome).order_by(JobAttempt.id)).all()
    assert outcomes == ["expired", "expired", "expired", None]


def test_retry_policy_is_one_documented_rule():
    policy = q.RetryPolicy(max_attempts=3, backoff_s=10.0, max_worker_crashes=2)
    assert [policy.retry_delay(n) for n in (1, 2, 3, 4)] == [10.0, 20.0, None, None]
    assert [policy.crash_loop(n) for n in (0, 1, 2)] == [False, False, True]


def test_system_error_is_retried_with_backoff_then_final(db):
    (sub,) = enqueue(db, 1)
    policy = q.RetryPolicy(max_attempts=3, backoff_s=0.0)
    for attempt in (1, 2):
        (claim,) = q.claim(db, "w", 1, 60)
        assert q.finish(db, claim.token, verdict(Status.SYSTEM_ERROR, "disk full"), "w", policy) == "retry"
        row = job(db, sub)
        assert row.state is JobState.QUEUED and row.system_errors == attempt and row.last_error == "disk full"
    (claim,) = q.claim(db, "w", 1, 60)
    assert q.finish(db, claim.token, verdict(Status.SYSTEM_ERROR, "disk full"), "w", policy) == "verdict"
    assert job(db, sub).state is JobState.DONE and verdict_count(db) == 1


def test_backoff_delays_the_retry(db):
    (sub,) = enqueue(db, 1)
    (claim,) = q.claim(db, "w", 1, 60)
    q.finish(db, claim.token, verdict(Status.SYSTEM_ERROR), "w", q.RetryPolicy(backoff_s=30.0))
    row = job(db, sub)
    assert 29 <= (row.not_before - utcnow()).total_seconds() <= 31
    assert q.claim(db, "w", 1, 60) == []


def test_release_requeues_without_counting_a_crash(db):
    (sub,) = enqueue(db, 1)
    (claim,) = q.claim(db, "w", 1, 60)
    assert q.release(db, claim.token) is True
    row = job(db, sub)
    assert row.state is JobState.QUEUED and row.crashes == 0 and row.worker_id is None
    (again,) = q.claim(db, "w2", 1, 60)
    assert again.crashes == 0 and again.job_id == claim.job_id


def test_a_verdict_whose_evidence_is_infinite_or_nan_is_stored_and_read_back(db):
    """An output of inf is evidence (max_abs_error: inf). PostgreSQL's JSON type refuses `Infinity`: before the
    fix the worker could not record such a verdict, its lease ran out, and the job counted a worker crash."""
    from sandbox.verdict import TrialResult

    (sub,) = enqueue(db, 1)
    (claim,) = q.claim(db, "w", 1, 60)
    trials = [TrialResult(trial=0, distribution="official", shape=[4, 4], seed=1, passed=False,
                          max_abs_error=float("inf"), max_rel_error=float("nan"), message="inf")]
    wrong = Verdict(status=Status.INCORRECT, diagnosis="1 of 1 trials failed", task="kl_div", device="cpu",
                    source_sha256="x", trials=trials, details={"claims_ms": [float("-inf")]})
    assert q.finish(db, claim.token, wrong, "w", q.RetryPolicy()) == "verdict"
    with db.transaction(read_only=True) as s:
        stored = s.scalars(select(VerdictRow).where(VerdictRow.submission_id == sub)).one().verdict
    back = Verdict.model_validate(stored)
    assert back.trials[0].max_abs_error == float("inf") and back.trials[0].max_rel_error != back.trials[0].max_rel_error
    assert stored["details"]["claims_ms"] == ["-Infinity"] and job(db, sub).state is JobState.DONE


def test_a_claim_never_takes_back_a_job_its_claimer_still_holds(db):
    """Issue 31: a database outage longer than the lease, one live worker: its next claim took back its own
    running job (a crash that never happened) and discarded its own verdict. The lease expires (timestamps set
    directly), the holder's claim passes its held tokens and gets nothing; its heartbeat and verdict still land."""
    (sub,) = enqueue(db, 1)
    (claim,) = q.claim(db, "w", 1, 60)
    run_it(db, claim)
    expire_leases(db)
    assert q.claim(db, "w", 5, 60, held=[claim.token]) == []
    row = job(db, sub)
    assert row.state is JobState.RUNNING and row.crashes == 0 and row.claims == 1
    assert q.heartbeat(db, [claim.token], 60) == set()
    assert q.finish(db, claim.token, verdict(), "w", q.RetryPolicy()) == "verdict"
    assert job(db, sub).crashes == 0 and verdict_count(db) == 1


def test_a_job_its_claimer_no_longer_holds_is_reclaimed_as_before(db):
    """Only held tokens are excluded: a job the worker let go (out of `held`) or another worker's expired job
    is taken back, and an expiry while running still counts."""
    enqueue(db, 2)
    mine, theirs = q.claim(db, "w", 1, 60)[0], q.claim(db, "other", 1, 60)[0]
    run_it(db, theirs)
    expire_leases(db)
    again = q.claim(db, "w", 5, 60, held=[mine.token])
    assert [c.job_id for c in again] == [theirs.job_id] and again[0].crashes == 1
    assert [c.job_id for c in q.claim(db, "w", 5, 60)] == [mine.job_id]


def test_the_crash_loop_verdict_is_a_final_system_error_that_blames_no_one(db):
    """After `max_worker_crashes` the job ends (no retry with backoff, though a system_error), and its verdict
    says what is known: its workers were lost, not that the candidate crashed them."""
    from service.worker.judging import crash_loop_verdict

    (sub,) = enqueue(db, 1)
    policy = q.RetryPolicy(max_attempts=3, backoff_s=0.0, max_worker_crashes=2)
    for _ in range(2):
        run_it(db, q.claim(db, "w", 1, 60)[0])
        expire_leases(db)
    (claim,) = q.claim(db, "w", 1, 60)
    assert policy.crash_loop(claim.crashes)
    final = crash_loop_verdict("kl_div", "cpu", "x", claim.crashes)
    assert q.finish(db, claim.token, final, "w", policy, final=True) == "verdict"
    row = job(db, sub)
    assert row.state is JobState.DONE and row.system_errors == 1 and verdict_count(db) == 1
    with db.transaction(read_only=True) as s:
        stored = s.scalars(select(VerdictRow).where(VerdictRow.submission_id == sub)).one()
    assert stored.status is Status.SYSTEM_ERROR and "lost 2 times" in stored.diagnosis
    assert "crashed the judging worker" not in stored.diagnosis
