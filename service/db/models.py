"""The tables. The database is the system of record: a submission is durable once POST returns.

- `api_keys`: who may submit (hashed keys) and their rate-limit bucket.
- `submissions`: what was sent (source and client metadata); immutable after insert.
- `jobs`: one per submission, the queue entry and its state machine (service.queue.states).
- `job_attempts`: every claim of a job by a worker and how it ended (for audits and crash loops).
- `verdicts`: at most one per submission (unique), the sandbox `Verdict` JSON plus indexed columns
  for the leaderboard.

Times are naive UTC `datetime`s (SQLite has no time zones); the API adds the zone on the way out.
"""

from __future__ import annotations

import datetime as dt
import uuid
from typing import Any

from sqlalchemy import JSON, Boolean, DateTime, Enum, Float, ForeignKey, Index, Integer, String, Text, UniqueConstraint
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column, relationship

from sandbox.verdict import Status
from service.queue.states import JobState


def utcnow() -> dt.datetime:
    return dt.datetime.now(dt.timezone.utc).replace(tzinfo=None)


def new_id() -> str:
    return uuid.uuid4().hex


class Base(DeclarativeBase):
    type_annotation_map = {dt.datetime: DateTime(), dict[str, Any]: JSON(), list[Any]: JSON()}


def _enum(cls: type) -> Enum:
    # Stored as the enum *values* in a plain string column: readable in SQL, no PostgreSQL ENUM type to migrate.
    return Enum(cls, values_callable=lambda e: [m.value for m in e], native_enum=False, length=32,
                validate_strings=True, create_constraint=False)


class ApiKey(Base):
    __tablename__ = "api_keys"

    id: Mapped[str] = mapped_column(String(32), primary_key=True, default=new_id)
    submitter: Mapped[str] = mapped_column(String(100), index=True)
    prefix: Mapped[str] = mapped_column(String(16))
    """The first characters of the key, shown in listings so a person can tell keys apart."""
    key_hash: Mapped[str] = mapped_column(String(64), unique=True)
    """sha256 of the key; the key itself is shown once, at creation, and never stored."""
    created_at: Mapped[dt.datetime] = mapped_column(default=utcnow)
    revoked_at: Mapped[dt.datetime | None]
    bucket_tokens: Mapped[float | None] = mapped_column(Float)
    bucket_updated_at: Mapped[dt.datetime | None]


class Submission(Base):
    __tablename__ = "submissions"
    __table_args__ = (UniqueConstraint("api_key_id", "idempotency_key", name="uq_submissions_idempotency"),)

    id: Mapped[str] = mapped_column(String(32), primary_key=True, default=new_id)
    task_id: Mapped[str] = mapped_column(String(64), index=True)
    source: Mapped[str] = mapped_column(Text)
    source_sha256: Mapped[str] = mapped_column(String(64), index=True)
    api_key_id: Mapped[str] = mapped_column(ForeignKey("api_keys.id"))
    submitter: Mapped[str] = mapped_column(String(100))
    idempotency_key: Mapped[str | None] = mapped_column(String(200))
    model: Mapped[str | None] = mapped_column(String(200), index=True)
    sample_index: Mapped[int | None]
    sampling: Mapped[dict[str, Any]] = mapped_column(default=dict)
    tags: Mapped[list[Any]] = mapped_column(default=list)
    created_at: Mapped[dt.datetime] = mapped_column(default=utcnow)

    job: Mapped[Job] = relationship(back_populates="submission", uselist=False)
    verdict: Mapped[VerdictRow | None] = relationship(back_populates="submission", uselist=False)


class Job(Base):
    __tablename__ = "jobs"
    __table_args__ = (Index("ix_jobs_claim", "state", "not_before", "id"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    """Monotonic: the queue is FIFO by id, and `position in queue` counts queued jobs before this one."""
    submission_id: Mapped[str] = mapped_column(ForeignKey("submissions.id"), unique=True)
    task_id: Mapped[str] = mapped_column(String(64))
    state: Mapped[JobState] = mapped_column(_enum(JobState), default=JobState.QUEUED)
    not_before: Mapped[dt.datetime] = mapped_column(default=utcnow)
    worker_id: Mapped[str | None] = mapped_column(String(200))
    claim_token: Mapped[str | None] = mapped_column(String(32))
    """New on every claim: a worker may only move or finish a job while its token is current."""
    lease_expires_at: Mapped[dt.datetime | None] = mapped_column(index=True)
    heartbeat_at: Mapped[dt.datetime | None]
    claims: Mapped[int] = mapped_column(default=0)
    crashes: Mapped[int] = mapped_column(default=0)
    """Times the job's lease expired under a worker (the worker died or hung while holding it)."""
    system_errors: Mapped[int] = mapped_column(default=0)
    last_error: Mapped[str | None] = mapped_column(Text)
    build_key: Mapped[str | None] = mapped_column(String(64))
    compile_cached: Mapped[bool | None] = mapped_column(Boolean)
    queued_at: Mapped[dt.datetime] = mapped_column(default=utcnow)
    compile_started_at: Mapped[dt.datetime | None]
    compiled_at: Mapped[dt.datetime | None]
    run_started_at: Mapped[dt.datetime | None]
    finished_at: Mapped[dt.datetime | None]

    submission: Mapped[Submission] = relationship(back_populates="job")


class JobAttempt(Base):
    __tablename__ = "job_attempts"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    job_id: Mapped[int] = mapped_column(ForeignKey("jobs.id"), index=True)
    claim_token: Mapped[str] = mapped_column(String(32), unique=True)
    worker_id: Mapped[str] = mapped_column(String(200))
    started_at: Mapped[dt.datetime] = mapped_column(default=utcnow)
    ended_at: Mapped[dt.datetime | None]
    outcome: Mapped[str | None] = mapped_column(String(32))
    """"verdict", "retry" (system_error), "released" (shutdown), "crashed" (lease expired), "lost"."""


class VerdictRow(Base):
    __tablename__ = "verdicts"
    __table_args__ = (Index("ix_verdicts_board", "task_id", "status", "device_name"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    submission_id: Mapped[str] = mapped_column(ForeignKey("submissions.id"), unique=True)
    """Unique: a submission has at most one verdict, whatever workers race to record it."""
    task_id: Mapped[str] = mapped_column(String(64))
    status: Mapped[Status] = mapped_column(_enum(Status))
    diagnosis: Mapped[str] = mapped_column(Text)
    device: Mapped[str | None] = mapped_column(String(32))
    device_name: Mapped[str | None] = mapped_column(String(200))
    median_ms: Mapped[float | None] = mapped_column(Float)
    speedup_eager: Mapped[float | None] = mapped_column(Float)
    speedup_compile: Mapped[float | None] = mapped_column(Float)
    speed_of_light: Mapped[float | None] = mapped_column(Float)
    worker_id: Mapped[str | None] = mapped_column(String(200))
    verdict: Mapped[dict[str, Any]]
    """The sandbox Verdict, `model_dump(mode="json")`."""
    created_at: Mapped[dt.datetime] = mapped_column(default=utcnow)

    submission: Mapped[Submission] = relationship(back_populates="verdict")
