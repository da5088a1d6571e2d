"""The few database operations routes and the CLI share: keys, submissions, leaderboard, baselines.

Every function takes the caller's `Session` first and never opens or commits a transaction itself: the
caller decides the transaction's extent (`with db.transaction() as session: crud.create_key(session, ...)`),
so several operations can share one, and a route's session comes from one dependency (service.api.deps).
"""

from __future__ import annotations

import datetime as dt
import hashlib
from dataclasses import dataclass

from sqlalchemy import and_, cast, exists, false, func, or_, select
from sqlalchemy.dialects.postgresql import JSONB
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from sandbox.needs import Needs
from sandbox.verdict import Status, Verdict
from service import visibility
from service.api import schemas
from service.core.security import display_prefix, generate_key, hash_key
from service.db.models import ApiKey, Job, Submission, VerdictRow, utcnow
from service.profiles import store as profiles
from service.queue import capability, wakeup
from service.queue.states import FINAL, PUBLIC, JobState, PublicStatus
from service.worker import headers as worker_headers


def aware(value: dt.datetime | None) -> dt.datetime | None:
    """Stored times are naive UTC; the API says so."""
    return value.replace(tzinfo=dt.timezone.utc) if value is not None else None


# --- keys ----------------------------------------------------------------------------------------

def create_key(session: Session, submitter: str) -> tuple[ApiKey, str]:
    """A new key for `submitter`: the row (flushed, so its id is set) and the secret, which is never stored."""
    key = generate_key()
    row = ApiKey(submitter=submitter, prefix=display_prefix(key), key_hash=hash_key(key))
    session.add(row)
    session.flush()
    return row, key


def find_key(session: Session, key: str) -> ApiKey | None:
    row = session.scalars(select(ApiKey).where(ApiKey.key_hash == hash_key(key))).first()
    return row if row is not None and row.revoked_at is None else None


def list_keys(session: Session) -> list[ApiKey]:
    return list(session.scalars(select(ApiKey).order_by(ApiKey.created_at)))


def revoke_key(session: Session, key_id: str) -> ApiKey | None:
    row = session.get(ApiKey, key_id)
    if row is not None and row.revoked_at is None:
        row.revoked_at = utcnow()
        session.flush()
    return row


def key_out(row: ApiKey) -> schemas.KeyOut:
    return schemas.KeyOut(id=row.id, submitter=row.submitter, prefix=row.prefix, created_at=aware(row.created_at),
                          revoked_at=aware(row.revoked_at))


# --- submissions ---------------------------------------------------------------------------------

class IdempotencyConflict(Exception):
    """The idempotency key was used before for a different task or source."""


@dataclass
class Created:
    submission: Submission
    duplicate: bool


def find_idempotent(session: Session, key_id: str, idempotency_key: str | None) -> Submission | None:
    if not idempotency_key:
        return None
    return session.scalars(select(Submission).where(Submission.api_key_id == key_id,
                                                    Submission.idempotency_key == idempotency_key)).first()


def check_replay(existing: Submission, body: schemas.SubmissionCreate) -> Created:
    if existing.task_id != body.task or existing.text_sha256 != sha256(body.source):
        raise IdempotencyConflict(f"idempotency key {existing.idempotency_key!r} was already used for submission "
                                  f"{existing.id} with a different task or source")
    return Created(existing, duplicate=True)


def sha256(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def unfinished_count(session: Session, key_id: str) -> int:
    """Interactive submissions of this key still waiting or being judged (the queue quota's measure).

    Batch samples have their own quota (service.batches) and cancelled jobs are final: counting either here
    would answer 429 to a key whose only backlog is a large batch."""
    return session.scalar(select(func.count()).select_from(Job).join(Submission)
                          .where(Submission.api_key_id == key_id, Submission.batch_id.is_(None),
                                 Job.state.not_in(FINAL))) or 0


def create_submission(session: Session, key: ApiKey, body: schemas.SubmissionCreate) -> Created:
    """Insert the submission and its queued job (flushed, in the caller's transaction: durable once that
    commits), or return the earlier submission with the same idempotency key."""
    existing = find_idempotent(session, key.id, body.idempotency_key)
    if existing is not None:
        return check_replay(existing, body)
    submission = Submission(task_id=body.task, source=body.source, text_sha256=sha256(body.source),
                            api_key_id=key.id, submitter=key.submitter, idempotency_key=body.idempotency_key,
                            model=body.model, sample_index=body.sample_index, sampling=body.sampling, tags=body.tags,
                            public=body.public)
    try:
        # A savepoint, so that losing the race below leaves the caller's transaction usable.
        with session.begin_nested():
            session.add(submission)
            session.flush()
            session.add(Job(submission_id=submission.id, task_id=body.task, queued_at=submission.created_at,
                            not_before=submission.created_at, **capability.job_needs(body.source)))
            session.flush()
            if body.profile:
                profiles.request(session, [submission.id])
    except IntegrityError:
        # A concurrent request with the same idempotency key won the insert (PostgreSQL waited for it to
        # commit before raising, and READ COMMITTED lets the next statement see it): return its submission.
        existing = find_idempotent(session, key.id, body.idempotency_key)
        if existing is None:
            raise
        return check_replay(existing, body)
    wakeup.announce(session)  # idle workers claim it when the caller commits, not at their next poll
    return Created(submission, duplicate=False)


def queue_position(session: Session, job: Job) -> int | None:
    if job.state is not JobState.QUEUED:
        return None
    now = utcnow()
    # Jobs a worker will claim first, in the claim order (service.queue.claims.claim): interactive jobs
    # (fair_key null) before batch jobs, then by fair_key, then by id.
    if job.fair_key is None:
        ahead = Job.fair_key.is_(None) & (Job.id < job.id)
    else:
        ahead = (Job.fair_key.is_(None) | (Job.fair_key < job.fair_key)
                 | ((Job.fair_key == job.fair_key) & (Job.id < job.id)))
    return session.scalar(select(func.count()).select_from(Job).where(
        Job.state == JobState.QUEUED, Job.not_before <= now, ahead)) or 0


def submission_view(session: Session, submission_id: str, public_after: dt.datetime | None = None,
                    viewer: visibility.Viewer = visibility.ANONYMOUS) -> schemas.SubmissionOut | None:
    """A submission as `viewer` may see it (never its source; its diagnostics and digests only where
    service/visibility.py says); `public_after` is Settings.sources_public_after."""
    sub = session.get(Submission, submission_id)
    if sub is None:
        return None
    # A duplicate inside a batch has no job of its own: it shares the job and verdict of the sample it repeats.
    judged_id = sub.duplicate_of or sub.id
    job = session.scalars(select(Job).where(Job.submission_id == judged_id)).first()
    if job is None:
        return None
    verdict_row = session.scalars(select(VerdictRow).where(VerdictRow.submission_id == judged_id)).first()
    verdict = schemas.VerdictView.model_validate(verdict_row.verdict) if verdict_row else None
    readable = visibility.can_see_diagnostics(sub, viewer, public_after)
    if verdict is not None and not readable:
        verdict = visibility.without_diagnostics(verdict)
    digest = sub.text_sha256 if readable else None
    return schemas.SubmissionOut(
        id=sub.id, task=sub.task_id, submitter=sub.submitter, model=sub.model, sample_index=sub.sample_index,
        sampling=sub.sampling, tags=sub.tags, text_sha256=digest, source_sha256=digest,
        status=PUBLIC[job.state], stage=job.state, position=queue_position(session, job),
        created_at=aware(sub.created_at),
        timestamps=schemas.Timestamps(queued_at=aware(job.queued_at), compile_started_at=aware(job.compile_started_at),
                                      compiled_at=aware(job.compiled_at), run_started_at=aware(job.run_started_at),
                                      finished_at=aware(job.finished_at)),
        attempts=job.claims, compile_cached=job.compile_cached,
        verdict=verdict, duplicate_of=sub.duplicate_of, public=sub.public,
        source_public=visibility.public_to_all(sub, public_after), waiting_for=_waiting_for(session, job),
        diagnostics_withheld=not readable, shared_headers=_shared_headers(session, job),
    )


def _shared_headers(session: Session, job: Job) -> schemas.SharedHeaders | None:
    """While the job is not done and a worker is still building the shared precompiled headers, how far
    (service/worker/headers.py: a first C++ build waits for its flags' header); None otherwise."""
    if PUBLIC[job.state] in (PublicStatus.DONE, PublicStatus.CANCELLED):
        return None
    return worker_headers.still_building(session)


def _waiting_for(session: Session, job: Job) -> list[str]:
    """What a queued job needs that no worker seen lately has (service/queue/capability.py); [] otherwise."""
    if job.state is not JobState.QUEUED or not (job.needs_gpu or job.language):
        return []
    return capability.fleet(session).missing(Needs(gpu=job.needs_gpu, language=job.language))


def submission_source(session: Session, submission_id: str) -> Submission | None:
    return session.get(Submission, submission_id)


@dataclass
class SubmissionFilter:
    """GET /v1/submissions filters; None means any."""

    task: str | None = None
    status: PublicStatus | None = None
    verdict: Status | None = None
    model: str | None = None
    tag: str | None = None
    batch: str | None = None


def _has_tag(session: Session, tag: str):  # noqa: ANN202
    """`tags` is a JSON list: SQLite searches it with json_each, PostgreSQL with jsonb containment."""
    if session.get_bind().dialect.name == "sqlite":
        each = func.json_each(Submission.tags).table_valued("value")
        return exists(select(1).select_from(each).where(each.c.value == tag))
    return cast(Submission.tags, JSONB).contains([tag])


BATCH_COLUMN = "batch_id"
"""The hook for batches (migration 0004 adds `submissions.batch_id`): the `batch` filter uses that column when
the model has it; until then no submission belongs to a batch and the filter matches nothing."""


class UnknownCursor(LookupError):
    """The cursor is not one of the caller's submissions."""


def list_submissions(session: Session, submitter: str, filters: SubmissionFilter, limit: int,
                     after: str | None = None) -> tuple[list[schemas.SubmissionSummary], str | None]:
    """One page of `submitter`'s submissions, newest first, and the cursor of the next page (None at the end).

    The cursor is the id of the page's last submission; the next page starts after its (created_at, id), so
    it stays stable while new submissions arrive (they sort before it)."""
    cursor = None
    if after is not None:
        last = session.get(Submission, after)
        if last is None or last.submitter != submitter:
            raise UnknownCursor(after)
        cursor = (last.created_at, last.id)
    query = (select(Submission, Job, VerdictRow.status, VerdictRow.median_ms).join(Job)
             .outerjoin(VerdictRow, VerdictRow.submission_id == Submission.id)
             .where(Submission.submitter == submitter))
    if filters.task is not None:
        query = query.where(Submission.task_id == filters.task)
    if filters.status is not None:
        query = query.where(Job.state.in_([s for s, public in PUBLIC.items() if public is filters.status]))
    if filters.verdict is not None:
        query = query.where(VerdictRow.status == filters.verdict)
    if filters.model is not None:
        query = query.where(Submission.model == filters.model)
    if filters.tag is not None:
        query = query.where(_has_tag(session, filters.tag))
    if filters.batch is not None:
        column = getattr(Submission, BATCH_COLUMN, None)
        query = query.where(column == filters.batch) if column is not None else query.where(false())
    if cursor is not None:
        created, last_id = cursor
        query = query.where(or_(Submission.created_at < created,
                                and_(Submission.created_at == created, Submission.id < last_id)))
    rows = session.execute(query.order_by(Submission.created_at.desc(), Submission.id.desc()).limit(limit + 1)).all()
    items = [schemas.SubmissionSummary(
        id=sub.id, task=sub.task_id, model=sub.model, sample_index=sub.sample_index, tags=sub.tags,
        status=PUBLIC[job.state], stage=job.state, verdict=verdict, median_ms=median_ms,
        created_at=aware(sub.created_at)) for sub, job, verdict, median_ms in rows[:limit]]
    return items, (rows[limit - 1][0].id if len(rows) > limit else None)


# --- baselines -----------------------------------------------------------------------------------

def device_baselines(session: Session, task_id: str) -> list[schemas.DeviceBaseline]:
    """Per device model, the baselines and bandwidth of the newest verdict that measured them."""
    newest = (select(VerdictRow.device_name, func.max(VerdictRow.id).label("id"))
              .where(VerdictRow.task_id == task_id, VerdictRow.median_ms.is_not(None),
                     VerdictRow.device_name.is_not(None))
              .group_by(VerdictRow.device_name).subquery())
    out = []
    for row in session.scalars(select(VerdictRow).join(newest, newest.c.id == VerdictRow.id)
                               .order_by(VerdictRow.device_name)):
        verdict = Verdict.model_validate(row.verdict)
        perf = verdict.performance
        if perf is None:
            continue
        bandwidth = perf.bandwidth_bytes_per_s
        shape = verdict.trials[0].shape if verdict.trials else None
        out.append(schemas.DeviceBaseline(
            device_name=row.device_name, shape=shape,
            baselines_ms={name: stats.median_ms for name, stats in perf.baselines.items()},
            bandwidth_bytes_per_s=bandwidth, min_bytes=perf.min_bytes,
            speed_of_light_ms=perf.min_bytes / bandwidth * 1e3 if bandwidth else None,
            measured_at=aware(row.created_at)))
    return out
