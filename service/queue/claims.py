"""The durable job queue: claim, heartbeat, advance, release and finish jobs, all in the database.

Safety rests on two things:

- Claiming is atomic. PostgreSQL: `SELECT ... FOR UPDATE SKIP LOCKED`, so concurrent workers never
  pick the same row and never wait on each other. SQLite: the claim runs in a `BEGIN IMMEDIATE`
  transaction (service.db.session), which holds the database's single write lock.
- Every claim gets a fresh `claim_token`. A worker may move or finish a job only while its token is
  current (`WHERE claim_token = :token`), so when a lease expires and another worker reclaims the job,
  the first worker's late result is discarded, and `verdicts.submission_id` is unique besides:
  a verdict is recorded exactly once.

The order of a claim (which ready jobs it takes) is a separate concern, service.queue.order: the fair order, or
longest expected device time first within a bounded window of it. It chooses among the rows the one locked read
returned, so it changes neither guarantee.

A job whose lease expired while `running` (its candidate executing on the device) counts a crash
against itself; at `max_worker_crashes` the reclaiming worker stores a final system_error that says what is
known (its workers were lost N times while executing it) instead of judging it again: a candidate that
kills workers is not retried forever, and a lost worker is never turned into a verdict on the candidate
(`RetryPolicy.crash_loop`). A claim never takes back a job the claiming worker still holds: a database
outage longer than the lease lets the lease expire under a worker that is alive and still judging it.
A lease that expired in `compiling` or `compiled` is reclaimed without blame: the candidate's code was not running. A
`system_error` verdict is the judge's fault: the job is requeued with an exponential backoff until
`max_attempts`, then the system_error is stored as final (both rules: `RetryPolicy`); one whose cause lasts (the
judge's full disk) waits for it instead, apart from those attempts (service.queue.requeue). A job its worker's
watchdog released (`AttemptOutcome.STALLED`) is never blamed either, whatever phase it stalled in.
"""

from __future__ import annotations

import datetime as dt
import logging
import uuid
from collections.abc import Callable, Collection
from dataclasses import dataclass

from sqlalchemy import ColumnElement, select, true, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from sandbox.needs import Capabilities
from sandbox.verdict import Status, Verdict, json_ready
from service.db.models import Job, JobAttempt, Submission, VerdictRow, utcnow
from service.db.session import Database
from service.queue import capability, order, requeue, wakeup
from service.queue.states import ACTIVE, BLAMED, AttemptOutcome, JobState, Outcome, Stage

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Claim:
    """A job as handed to a worker: what to judge and the token that proves it is still ours."""

    job_id: int
    submission_id: str
    task_id: str
    source: str
    text_sha256: str
    """sha256 of `source`, the text as sent."""
    token: str
    crashes: int
    """Times this job's lease expired under a worker before this claim."""
    build_key: str | None = None
    """In the run stage: the key its builder built it under (the artifact's name in `artifacts`)."""
    artifact_sha256: str | None = None
    """In the run stage: the digest of the artifact its builder published (Stage.RUN); None in the build stage."""


@dataclass(frozen=True)
class RetryPolicy:
    """When a failure is retried, and when it becomes final."""

    max_attempts: int = 3
    """system_error verdicts per job before the last one is stored as final."""
    backoff_s: float = 30.0
    """Delay before the first retry; doubled for each later one."""
    max_worker_crashes: int = 2
    """Workers lost while the job's candidate was executing before a final system_error (`crash_loop`)."""
    waits: requeue.Waits = requeue.Waits()
    """A system_error of a lasting cause of the host's (a full disk) waits instead (service.queue.requeue), the
    first wait `backoff_s`."""

    def retry_delay(self, system_errors: int) -> float | None:
        """Seconds to wait before judging again a job that has now had `system_errors` system_errors
        (this one included), or None when that was the last attempt and the system_error is final."""
        if system_errors >= self.max_attempts:
            return None
        return self.backoff_s * 2 ** (system_errors - 1)

    def crash_loop(self, crashes: int) -> bool:
        """True when a job whose workers were lost `crashes` times while running it must not run again.

        Its final verdict is a system_error, stored at once (`finish(..., final=True)`), never retried with
        backoff: the queue knows only that the lease expired while the candidate ran, not why. The candidate
        may have killed its worker, but so does an OOM kill of the worker, a host reboot, an operator's
        SIGKILL or a database outage longer than the lease, and a runtime_error would state a cause that is
        not known. Stopping here keeps a worker-killing candidate from looping forever; calling it a
        system_error keeps infrastructure failures out of the candidate's verdict (and out of rewards)."""
        return crashes >= self.max_worker_crashes


def _lease(now: dt.datetime, lease_s: float) -> dt.datetime:
    return now + dt.timedelta(seconds=lease_s)


def _end_attempt(session: Session, token: str | None, outcome: AttemptOutcome, now: dt.datetime) -> None:
    if token:
        session.execute(update(JobAttempt).where(JobAttempt.claim_token == token, JobAttempt.ended_at.is_(None))
                        .values(ended_at=now, outcome=outcome.value))


def claim(db: Database, worker_id: str, limit: int, lease_s: float,
          held: Collection[str] = (), *, seconds: Callable[[str], float] | None = None,
          window: int = 1, capabilities: Capabilities | None = None, stage: Stage | None = None) -> list[Claim]:
    """Atomically take up to `limit` ready jobs: queued ones whose backoff has passed, and jobs whose
    worker's lease expired (reclaimed; a crash if it expired while running). Interactive first, then batches in
    fair order.

    `held` are the claim tokens of the jobs the caller still works on. Their leases may have expired (the
    database was away longer than the lease, so no heartbeat reached it), but the caller is alive and judging
    them: taking one back would count a crash that never happened and discard the caller's own result.

    `seconds` (a task's expected device seconds, service.queue.lengths) with `window` > 1: longest first among the
    first `window` places of the fair order (service.queue.order, which bounds the reordering). The candidates
    are read and locked in the same statement as before, `window` rows instead of `limit`; those not taken are
    unlocked at commit, untouched.

    `capabilities`: what the claiming worker can judge; it is handed only jobs whose needs they cover
    (service/queue/capability.py), the others stay queued for a worker that has what they need.

    `stage`: only jobs of that stage (service.queue.states.Stage): a builder claims the build stage, a run worker
    with builders alive the run stage. None (a worker that builds and runs): both, in the one fair order, so a
    built job is not passed over by newer builds, nor a build by newer built jobs."""
    if limit <= 0:
        return []
    now = utcnow()
    reorder = seconds is not None and window > 1
    claims: list[Claim] = []
    with db.transaction() as session:
        candidates = _ready(session, db.sqlite, now, held, max(limit, window) if reorder else limit,
                            capability.claimable(capabilities) & _in_stage(stage))
        for job in order.longest_first(candidates, limit, seconds, window) if reorder else candidates:
            if job.state is BLAMED:  # the candidate was executing when its worker died
                job.crashes += 1
                _end_attempt(session, job.claim_token, AttemptOutcome.CRASHED, now)
                log.warning("job %s: lease of %s expired while running; reclaimed (crash %d)",
                            job.id, job.worker_id, job.crashes)
            elif job.state is not JobState.QUEUED:  # died (or lost the database) before running it: no blame
                _end_attempt(session, job.claim_token, AttemptOutcome.EXPIRED, now)
                log.warning("job %s: lease of %s expired in state %s; reclaimed (not counted as a crash)",
                            job.id, job.worker_id, job.state.value)
            token = uuid.uuid4().hex
            job.state = JobState.COMPILING
            job.claim_token = token
            job.worker_id = worker_id
            job.lease_expires_at = _lease(now, lease_s)
            job.heartbeat_at = now
            job.claims += 1
            job.compile_started_at = now
            job.compiled_at = job.run_started_at = None
            session.add(JobAttempt(job_id=job.id, claim_token=token, worker_id=worker_id, started_at=now))
            sub = session.get(Submission, job.submission_id)
            claims.append(Claim(job.id, job.submission_id, job.task_id, sub.source, sub.text_sha256, token,
                                job.crashes, build_key=job.build_key if job.artifact_sha256 else None,
                                artifact_sha256=job.artifact_sha256))
    return claims


def _in_stage(stage: Stage | None) -> ColumnElement[bool]:
    if stage is None:
        return true()
    return Job.artifact_sha256.is_(None) if stage is Stage.BUILD else Job.artifact_sha256.is_not(None)


def _ready(session: Session, sqlite: bool, now: dt.datetime, held: Collection[str], n: int,
           claimable: ColumnElement[bool]) -> list[Job]:
    """The first `n` ready jobs in fair order, locked for this transaction (PostgreSQL: `FOR UPDATE SKIP LOCKED`;
    SQLite: the transaction's write lock).

    Fair order: interactive jobs (fair_key null) before any batch job, then batch jobs by virtual start time, which
    interleaves concurrent batches round-robin (service.batches.fairness); FIFO within each. The ready jobs are read
    as three disjoint sets, each in that order and limited to `n`, and merged: leases expired under another worker
    (few; `lease_expires_at` is indexed), queued interactive jobs, queued batch jobs (walked in `ix_jobs_fair`
    order). One statement over all of them cannot use an index for `fair_key NULLS FIRST, id` and sorted every ready
    job on every claim: ~30 ms of server CPU per claim with 20,000 queued, growing with the backlog
    (docs/results/fleet-db-cpu-2026-11-26.md)."""
    expired = Job.state.in_(ACTIVE) & (Job.lease_expires_at < now) & claimable
    if held:
        expired &= Job.claim_token.not_in(list(held))
    queued = (Job.state == JobState.QUEUED) & (Job.not_before <= now) & claimable
    parts = [select(Job).where(expired).order_by(Job.fair_key.asc().nulls_first(), Job.id),
             select(Job).where(queued, Job.fair_key.is_(None)).order_by(Job.id),
             select(Job).where(queued, Job.fair_key.is_not(None)).order_by(Job.fair_key, Job.id)]
    ready: list[Job] = []
    for query in parts:
        query = query.limit(n)
        if not sqlite:
            query = query.with_for_update(skip_locked=True, of=Job)
        ready.extend(session.scalars(query).all())
    return sorted(ready, key=order.fair_order)[:n]


def heartbeat(db: Database, tokens: list[str], lease_s: float) -> set[str]:
    """Extend the leases of the jobs held under `tokens`; returns the tokens that are no longer ours."""
    if not tokens:
        return set()
    now = utcnow()
    with db.transaction() as session:
        session.execute(update(Job).where(Job.claim_token.in_(tokens), Job.state.in_(ACTIVE))
                        .values(lease_expires_at=_lease(now, lease_s), heartbeat_at=now))
        held = set(session.scalars(select(Job.claim_token).where(Job.claim_token.in_(tokens),
                                                                  Job.state.in_(ACTIVE))))
    return set(tokens) - held


def advance(db: Database, token: str, state: JobState, **values: object) -> bool:
    """Move a held job to `state` (compiled or running), stamping its times. False if no longer ours."""
    stamp = {JobState.COMPILED: "compiled_at", JobState.RUNNING: "run_started_at"}[state]
    with db.transaction() as session:
        result = session.execute(update(Job).where(Job.claim_token == token, Job.state.in_(ACTIVE))
                                 .values(state=state, **{stamp: utcnow()}, **values))
    return result.rowcount == 1


def release(db: Database, token: str, outcome: AttemptOutcome = AttemptOutcome.RELEASED) -> bool:
    """Give a held job back to the queue unjudged (graceful shutdown, a failure of ours, or a stall seen by the
    worker's watchdog: `outcome` records which on the claim). Never counted as a crash."""
    now = utcnow()
    with db.transaction() as session:
        result = session.execute(update(Job).where(Job.claim_token == token, Job.state.in_(ACTIVE)).values(
            state=JobState.QUEUED, claim_token=None, worker_id=None, lease_expires_at=None,
            compile_started_at=None, compiled_at=None, run_started_at=None))
        if result.rowcount:
            _end_attempt(session, token, outcome, now)
    return result.rowcount == 1


def publish(db: Database, token: str, build_key: str, artifact_sha256: str, *, compile_cached: bool) -> bool:
    """A builder's held job, built and its artifact stored (service/artifacts): back to `queued` in the run stage,
    unheld, for a run worker to claim (no blame; the claim ends as `built`). Run workers are woken at commit.
    False if the job is no longer this builder's (nothing written)."""
    now = utcnow()
    with db.transaction() as session:
        result = session.execute(update(Job).where(Job.claim_token == token, Job.state.in_(ACTIVE)).values(
            state=JobState.QUEUED, claim_token=None, worker_id=None, lease_expires_at=None, not_before=now,
            build_key=build_key, artifact_sha256=artifact_sha256, compile_cached=compile_cached, compiled_at=now,
            run_started_at=None))
        if result.rowcount:
            _end_attempt(session, token, AttemptOutcome.BUILT, now)
            wakeup.announce(session, wakeup.QUEUED, "built")
    return result.rowcount == 1


def finish(db: Database, token: str, verdict: Verdict, worker_id: str, policy: RetryPolicy, *,
           final: bool = False) -> Outcome:
    """Record the result of a held job: a verdict (stored, job done), a retry (system_error below the
    policy's limit: requeued with backoff) or lost (the job is no longer ours: nothing is written).
    `final`: store the verdict even if it is a system_error below the limit (the crash-loop verdict, which
    must end the retries: `RetryPolicy.crash_loop`)."""
    now = utcnow()
    try:
        with db.transaction() as session:
            query = select(Job).where(Job.claim_token == token, Job.state.in_(ACTIVE))
            if not db.sqlite:
                query = query.with_for_update()
            job = session.scalars(query).first()
            if job is None:
                return Outcome.LOST
            retryable = verdict.status is Status.SYSTEM_ERROR and not final
            kind = requeue.cause(verdict) if retryable else None
            if kind is not None:  # a lasting cause (the judge's full disk) waits, apart from the system_errors
                wait, verdict = requeue.decide(session, job.id, verdict, kind, policy.waits, policy.backoff_s)
                if wait is not None:
                    _requeue(job, now, wait, verdict)
                    _end_attempt(session, token, requeue.CAUSES[kind], now)
                    return Outcome.RETRY
                retryable = False
            delay = policy.retry_delay(job.system_errors + 1) if retryable else None
            if delay is not None:
                job.system_errors += 1
                _requeue(job, now, delay, verdict)
                _end_attempt(session, token, AttemptOutcome.RETRY, now)
                log.warning("job %s: system_error (%d/%d), retry in %.0f s: %s", job.id, job.system_errors,
                            policy.max_attempts, delay, verdict.diagnosis[:200])
                return Outcome.RETRY
            if verdict.status is Status.SYSTEM_ERROR:
                job.system_errors += 1
            job.state = JobState.DONE
            job.finished_at = now
            job.lease_expires_at = None
            _end_attempt(session, token, AttemptOutcome.VERDICT, now)
            session.add(verdict_row(job.submission_id, job.task_id, verdict, worker_id))
            # Event streams and reward calls waiting for this verdict wake at commit (service/queue/wakeup.py).
            wakeup.announce(session, wakeup.DONE, f"s:{job.submission_id}")
            if job.submission.batch_id is not None:
                wakeup.announce(session, wakeup.DONE, f"b:{job.submission.batch_id}")
    except IntegrityError:
        # Unreachable while tokens are respected; the unique submission_id is the last line of defence.
        log.error("job with token %s: a verdict already exists; discarding this one", token)
        return Outcome.LOST
    return Outcome.VERDICT


def _requeue(job: Job, now: dt.datetime, delay: float, verdict: Verdict) -> None:
    """Put a held job back in the queue, judged again after `delay` seconds; `verdict` (a system_error) is kept as
    its last error."""
    job.state = JobState.QUEUED
    job.not_before = now + dt.timedelta(seconds=delay)
    job.last_error = verdict.diagnosis[:4000]
    job.claim_token = job.worker_id = job.lease_expires_at = None


def verdict_row(submission_id: str, task_id: str, verdict: Verdict, worker_id: str | None) -> VerdictRow:
    perf = verdict.performance
    env = verdict.environment
    return VerdictRow(
        submission_id=submission_id,
        task_id=task_id,
        status=verdict.status,
        diagnosis=verdict.diagnosis,
        device=verdict.device,
        device_name=env.device_name if env else None,
        median_ms=perf.candidate.median_ms if perf else None,
        speedup_eager=perf.speedups.get("eager") if perf else None,
        speedup_compile=perf.speedups.get("compile") if perf else None,
        speed_of_light=perf.speed_of_light_fraction if perf else None,
        worker_id=worker_id,
        verdict=json_ready(verdict),
    )
