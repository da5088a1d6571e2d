"""The few database operations routes and the CLI share: keys, submissions, leaderboard, baselines."""

from __future__ import annotations

import datetime as dt
import hashlib
from dataclasses import dataclass

from sqlalchemy import func, select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from sandbox.verdict import Status, Verdict
from service.api import schemas
from service.core.security import display_prefix, generate_key, hash_key
from service.db.models import ApiKey, Job, Submission, VerdictRow, utcnow
from service.db.session import Database
from service.queue.states import PUBLIC, JobState


def aware(value: dt.datetime | None) -> dt.datetime | None:
    """Stored times are naive UTC; the API says so."""
    return value.replace(tzinfo=dt.timezone.utc) if value is not None else None


# --- keys ----------------------------------------------------------------------------------------

def create_key(db: Database, submitter: str) -> tuple[ApiKey, str]:
    key = generate_key()
    row = ApiKey(submitter=submitter, prefix=display_prefix(key), key_hash=hash_key(key))
    with db.transaction() as session:
        session.add(row)
    return row, key


def find_key(session: Session, key: str) -> ApiKey | None:
    row = session.scalars(select(ApiKey).where(ApiKey.key_hash == hash_key(key))).first()
    return row if row is not None and row.revoked_at is None else None


def list_keys(db: Database) -> list[ApiKey]:
    with db.transaction(read_only=True) as session:
        return list(session.scalars(select(ApiKey).order_by(ApiKey.created_at)))


def revoke_key(db: Database, key_id: str) -> ApiKey | None:
    with db.transaction() as session:
        row = session.get(ApiKey, key_id)
        if row is not None and row.revoked_at is None:
            row.revoked_at = utcnow()
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
    if existing.task_id != body.task or existing.source_sha256 != sha256(body.source):
        raise IdempotencyConflict(f"idempotency key {existing.idempotency_key!r} was already used for submission "
                                  f"{existing.id} with a different task or source")
    return Created(existing, duplicate=True)


def sha256(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def unfinished_count(session: Session, key_id: str) -> int:
    return session.scalar(select(func.count()).select_from(Job).join(Submission)
                          .where(Submission.api_key_id == key_id, Job.state != JobState.DONE)) or 0


def create_submission(db: Database, key: ApiKey, body: schemas.SubmissionCreate) -> Created:
    """Insert the submission and its queued job in one transaction: durable once this returns."""
    submission = Submission(task_id=body.task, source=body.source, source_sha256=sha256(body.source),
                            api_key_id=key.id, submitter=key.submitter, idempotency_key=body.idempotency_key,
                            model=body.model, sample_index=body.sample_index, sampling=body.sampling, tags=body.tags)
    try:
        with db.transaction() as session:
            existing = find_idempotent(session, key.id, body.idempotency_key)
            if existing is not None:
                return check_replay(existing, body)
            session.add(submission)
            session.flush()
            session.add(Job(submission_id=submission.id, task_id=body.task, queued_at=submission.created_at,
                            not_before=submission.created_at))
    except IntegrityError:
        # A concurrent request with the same idempotency key won the insert: return its submission.
        with db.transaction(read_only=True) as session:
            existing = find_idempotent(session, key.id, body.idempotency_key)
            if existing is None:
                raise
            return check_replay(existing, body)
    return Created(submission, duplicate=False)


def queue_position(session: Session, job: Job) -> int | None:
    if job.state is not JobState.QUEUED:
        return None
    now = utcnow()
    return session.scalar(select(func.count()).select_from(Job).where(
        Job.state == JobState.QUEUED, Job.id < job.id, Job.not_before <= now)) or 0


def submission_view(session: Session, submission_id: str) -> schemas.SubmissionOut | None:
    row = session.execute(select(Submission, Job).join(Job).where(Submission.id == submission_id)).first()
    if row is None:
        return None
    sub, job = row
    verdict_row = session.scalars(select(VerdictRow).where(VerdictRow.submission_id == sub.id)).first()
    return schemas.SubmissionOut(
        id=sub.id, task=sub.task_id, submitter=sub.submitter, model=sub.model, sample_index=sub.sample_index,
        sampling=sub.sampling, tags=sub.tags, source_sha256=sub.source_sha256,
        status=PUBLIC[job.state], stage=job.state, position=queue_position(session, job),
        created_at=aware(sub.created_at),
        timestamps=schemas.Timestamps(queued_at=aware(job.queued_at), compile_started_at=aware(job.compile_started_at),
                                      compiled_at=aware(job.compiled_at), run_started_at=aware(job.run_started_at),
                                      finished_at=aware(job.finished_at)),
        attempts=job.claims, compile_cached=job.compile_cached,
        verdict=Verdict.model_validate(verdict_row.verdict) if verdict_row else None,
    )


# --- leaderboard ---------------------------------------------------------------------------------

SORTS = {
    "speedup_eager": (VerdictRow.speedup_eager, True),
    "speedup_compile": (VerdictRow.speedup_compile, True),
    "speed_of_light": (VerdictRow.speed_of_light, True),
    "median_ms": (VerdictRow.median_ms, False),
}
"""Leaderboard sort keys: column and whether larger is better."""


def leaderboard(db: Database, task_id: str, by: str, sort: str, device_name: str | None, limit: int) -> schemas.Leaderboard:
    """Best correct submission per submitter (or model) per device model; ties go to the earlier submission."""
    column, larger_better = SORTS[sort]
    group = Submission.submitter if by == "submitter" else Submission.model
    order = (column.desc() if larger_better else column.asc(), Submission.created_at.asc(), Submission.id.asc())
    ranked = (
        select(VerdictRow.device_name, group.label("name"), Submission.submitter, Submission.model,
               Submission.id.label("submission_id"), Submission.created_at, VerdictRow.median_ms,
               VerdictRow.speedup_eager, VerdictRow.speedup_compile, VerdictRow.speed_of_light,
               func.row_number().over(partition_by=(VerdictRow.device_name, group), order_by=order).label("best"))
        .join(Submission, Submission.id == VerdictRow.submission_id)
        .where(VerdictRow.task_id == task_id, VerdictRow.status == Status.CORRECT, column.is_not(None),
               VerdictRow.device_name.is_not(None), group.is_not(None))
    )
    if device_name:
        ranked = ranked.where(VerdictRow.device_name == device_name)
    sub = ranked.subquery()
    metric = sub.c[sort]
    query = (select(sub).where(sub.c.best == 1)
             .order_by(sub.c.device_name, metric.desc() if larger_better else metric.asc(), sub.c.created_at,
                       sub.c.submission_id))
    boards: dict[str, list[schemas.LeaderboardEntry]] = {}
    with db.transaction(read_only=True) as session:
        for row in session.execute(query):
            entries = boards.setdefault(row.device_name, [])
            if len(entries) >= limit:
                continue
            entries.append(schemas.LeaderboardEntry(
                rank=len(entries) + 1, name=row.name, submitter=row.submitter, model=row.model,
                submission_id=row.submission_id, median_ms=row.median_ms, speedup_eager=row.speedup_eager,
                speedup_compile=row.speedup_compile, speed_of_light=row.speed_of_light,
                submitted_at=aware(row.created_at)))
    return schemas.Leaderboard(task=task_id, by=by, sort=sort,
                               devices=[schemas.DeviceBoard(device_name=d, entries=e) for d, e in boards.items()])


def device_baselines(db: Database, task_id: str) -> list[schemas.DeviceBaseline]:
    """Per device model, the baselines and bandwidth of the newest verdict that measured them."""
    newest = (select(VerdictRow.device_name, func.max(VerdictRow.id).label("id"))
              .where(VerdictRow.task_id == task_id, VerdictRow.median_ms.is_not(None),
                     VerdictRow.device_name.is_not(None))
              .group_by(VerdictRow.device_name).subquery())
    out = []
    with db.transaction(read_only=True) as session:
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
