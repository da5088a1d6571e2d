"""The tables. The database is the system of record: a submission is durable once POST returns.

- `api_keys`: who may submit (hashed keys) and their rate-limit bucket.
- `submissions`: what was sent (source and client metadata); immutable after insert, but for `public`.
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

from sqlalchemy import (JSON, BigInteger, Boolean, DateTime, Enum, Float, ForeignKey, Index, Integer, LargeBinary,
                        String, Text, UniqueConstraint, event, false, text)
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


class Batch(Base):
    """A set of samples scored together (service.batches): a JSONL upload, or one call of POST /v1/rewards.
    Its samples are the `submissions` with this `batch_id`; its state and counts are derived from their jobs."""

    __tablename__ = "batches"
    __table_args__ = (Index("ix_batches_key_created", "api_key_id", "created_at"),)

    id: Mapped[str] = mapped_column(String(32), primary_key=True, default=new_id)
    name: Mapped[str | None] = mapped_column(String(200))
    kind: Mapped[str] = mapped_column(String(16), default="batch")
    """"batch" (POST /v1/batches) or "rewards" (POST /v1/rewards)."""
    api_key_id: Mapped[str] = mapped_column(ForeignKey("api_keys.id"))
    submitter: Mapped[str] = mapped_column(String(100))
    tags: Mapped[list[Any]] = mapped_column(default=list)
    total: Mapped[int] = mapped_column(default=0)
    """Samples accepted (duplicates included)."""
    duplicates: Mapped[int] = mapped_column(default=0)
    rejected: Mapped[list[Any]] = mapped_column(default=list)
    """The lines refused at upload: [{"line": n, "error": "..."}]."""
    created_at: Mapped[dt.datetime] = mapped_column(default=utcnow)
    cancelled_at: Mapped[dt.datetime | None]


class Submission(Base):
    __tablename__ = "submissions"
    __table_args__ = (UniqueConstraint("api_key_id", "idempotency_key", name="uq_submissions_idempotency"),
                      Index("ix_submissions_batch_line", "batch_id", "line"))

    id: Mapped[str] = mapped_column(String(32), primary_key=True, default=new_id)
    task_id: Mapped[str] = mapped_column(String(64), index=True)
    source: Mapped[str] = mapped_column(Text)
    text_sha256: Mapped[str] = mapped_column("source_sha256", String(64), index=True)
    """sha256 of the text as sent (the raw completion or module). The column keeps its first name, `source_sha256`:
    renaming it would take a migration and change nothing it holds."""
    api_key_id: Mapped[str] = mapped_column(ForeignKey("api_keys.id"))
    submitter: Mapped[str] = mapped_column(String(100))
    idempotency_key: Mapped[str | None] = mapped_column(String(200))
    model: Mapped[str | None] = mapped_column(String(200), index=True)
    sample_index: Mapped[int | None] = mapped_column(BigInteger)
    """Signed 64 bits (migration 0002); the API refuses larger values (schemas.MAX_SAMPLE_INDEX)."""
    sampling: Mapped[dict[str, Any]] = mapped_column(default=dict)
    tags: Mapped[list[Any]] = mapped_column(default=list)
    created_at: Mapped[dt.datetime] = mapped_column(default=utcnow)
    public: Mapped[bool] = mapped_column(Boolean, default=False, server_default=false())
    """Its submitter made its source readable by anyone (migration 0008); who may read it is decided by
    service/visibility.py alone."""
    # Batch samples (migration 0004, service.batches); all null for a submission sent on its own.
    batch_id: Mapped[str | None] = mapped_column(ForeignKey("batches.id"))
    line: Mapped[int | None]
    """The sample's 1-based line in its batch upload (index + 1 for a JSON list)."""
    duplicate_of: Mapped[str | None] = mapped_column(ForeignKey("submissions.id"))
    """The submission of the same batch whose identical extracted code is judged in this one's place: a
    duplicate has no job and no verdict row of its own, and shares that submission's verdict."""
    parent_id: Mapped[str | None] = mapped_column(ForeignKey("submissions.id"))
    """The previous refinement turn this sample answers (multi-turn generation)."""
    turn: Mapped[int | None]
    sample_metadata: Mapped[dict[str, Any] | None] = mapped_column(JSON)
    """Free client metadata of a batch sample, returned with its results."""

    job: Mapped[Job] = relationship(back_populates="submission", uselist=False)
    verdict: Mapped[VerdictRow | None] = relationship(back_populates="submission", uselist=False)


class Job(Base):
    __tablename__ = "jobs"
    __table_args__ = (Index("ix_jobs_claim", "state", "not_before", "id"), Index("ix_jobs_fair", "state", "fair_key"))

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
    fair_key: Mapped[int | None] = mapped_column(BigInteger)
    """Claim order of a batch job (migration 0004, service.batches.fairness): its virtual start time. Null for an
    interactive submission, which is claimed before any batch job."""
    needs_gpu: Mapped[bool] = mapped_column(Boolean, default=False, server_default=false())
    """Judging it needs a GPU (migration 0012, sandbox/needs.py): only a worker that has one claims it."""
    language: Mapped[str | None] = mapped_column(String(32))
    """The optional kernel language it is written in (sandbox/languages.py id), which its worker must have; null:
    torch and its extension builder only, which every worker has."""
    artifact_sha256: Mapped[str | None] = mapped_column(String(64))
    """sha256 of the build artifact its builder published (migration 0013, service/artifacts), with `build_key`
    naming it in `artifacts`: set, the job is in the run stage (service.queue.states.Stage); null, the build stage.
    The run worker loads only an artifact with exactly these bytes."""

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
    """"verdict", "retry" (system_error), "released" (shutdown), "crashed" (lease expired while running),
    "expired" (lease expired before running: not blamed), "disk_full" (waits for space: service.queue.requeue),
    "lost"."""
    # Device holds (migration 0006, service.worker.holds): null until the claim reached a device.
    device: Mapped[str | None] = mapped_column(String(200))
    """The device this claim executed on, as `host/device` with CUDA_VISIBLE_DEVICES resolved (one lane of the
    device-busy timeline, service.observability.timeline)."""
    execute_started_at: Mapped[dt.datetime | None] = mapped_column(index=True)
    """Just before sandbox.execute: from here the device is this job's."""
    execute_ended_at: Mapped[dt.datetime | None]
    """Just after sandbox.execute returned; null while it runs, or when the worker died during it."""


class VerdictRow(Base):
    __tablename__ = "verdicts"
    __table_args__ = (
        Index("ix_verdicts_board", "task_id", "status", "device_name"),
        # The rankable verdicts (service/rankable.py) are counted on every leaderboard request: an index-only scan
        # of this partial index instead of a scan of every verdict (migration 0007).
        Index("ix_verdicts_rankable", "task_id", "status", "id",
              postgresql_where=text("median_ms IS NOT NULL AND device_name IS NOT NULL"),
              sqlite_where=text("median_ms IS NOT NULL AND device_name IS NOT NULL")),
    )

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
    # Ranking columns (migration 0005): copies of verdict fields the leaderboard ranks on, filled at insert by
    # `ranking_columns` (the listener below), so ranking never parses the JSON of thousands of rows.
    source_sha256: Mapped[str | None] = mapped_column(String(64))
    """sha256 of the code judged (after extraction from a completion): one leaderboard entry per distinct code."""
    isolation: Mapped[str | None] = mapped_column(String(100))
    q25_ms: Mapped[float | None] = mapped_column(Float)
    q75_ms: Mapped[float | None] = mapped_column(Float)
    extra_passed: Mapped[int | None]
    extra_total: Mapped[int | None]
    peak_memory_bytes: Mapped[int | None] = mapped_column(BigInteger)
    reference_peak_memory_bytes: Mapped[int | None] = mapped_column(BigInteger)
    unranked_reason: Mapped[str | None] = mapped_column(String(300))
    """Why a correct verdict's time is not ranked (`Verdict.unranked_reason`, migration 0010); null when ranked."""

    submission: Mapped[Submission] = relationship(back_populates="verdict")


def ranking_columns(verdict: dict[str, Any]) -> dict[str, Any]:
    """The ranking columns of a verdict (its `model_dump(mode="json")`); used at insert and by migration 0005."""
    perf = verdict.get("performance") or {}
    candidate = perf.get("candidate") or {}
    env = verdict.get("environment") or {}
    extra = verdict.get("extra_shapes") or []
    return {"source_sha256": verdict.get("source_sha256"), "isolation": (env.get("isolation") or "")[:100] or None,
            "q25_ms": candidate.get("q25_ms"), "q75_ms": candidate.get("q75_ms"),
            "extra_passed": sum(1 for t in extra if t.get("passed")), "extra_total": len(extra),
            "peak_memory_bytes": perf.get("peak_memory_bytes"),
            "reference_peak_memory_bytes": perf.get("reference_peak_memory_bytes"),
            "unranked_reason": None if verdict.get("ranked", True) else
            (verdict.get("unranked_reason") or "not ranked")[:300]}


@event.listens_for(VerdictRow, "before_insert")
def _fill_ranking_columns(_mapper, _connection, row: VerdictRow) -> None:
    # Here rather than in each writer, so every code path that records a verdict (worker, batches) fills them.
    for name, value in ranking_columns(row.verdict or {}).items():
        if getattr(row, name) is None:
            setattr(row, name, value)


class WorkerRow(Base):
    """One row per worker process, written by its heartbeat: who is alive, what it holds, what it did.

    `stats` holds the worker's cumulative counters (stage-duration histograms, device busy seconds,
    verdicts); /metrics sums them over all rows at scrape, so metrics work with workers on any host.
    """

    __tablename__ = "workers"

    id: Mapped[str] = mapped_column(String(200), primary_key=True)
    """`host:pid`, the same string as jobs.worker_id."""
    host: Mapped[str] = mapped_column(String(200))
    pid: Mapped[int]
    devices: Mapped[list[Any]] = mapped_column(default=list)
    judge_mode: Mapped[str] = mapped_column(String(32))
    started_at: Mapped[dt.datetime] = mapped_column(default=utcnow)
    last_seen_at: Mapped[dt.datetime] = mapped_column(default=utcnow, index=True)
    stopped_at: Mapped[dt.datetime | None]
    """Set on a clean shutdown; a worker that died keeps None and simply stops being seen."""
    current_jobs: Mapped[list[Any]] = mapped_column(default=list)
    """[{job_id, submission_id, task_id, phase (HeldPhase), since}] as of the last heartbeat."""
    stats: Mapped[dict[str, Any]] = mapped_column(default=dict)
    judges: Mapped[list[Any] | None] = mapped_column(JSON)
    """What it can judge (migration 0012, sandbox/needs.py `Capabilities.words`): "gpu" if it has one, and the
    kernel languages installed there. Null for a worker of an older version."""
    role: Mapped[str | None] = mapped_column(String(16))
    """"build", "run" or "all" (migration 0013, service/worker/roles.py); null for a worker of an older version,
    which builds and runs (all). Run workers read the builders' rows to know whether any is alive."""


class ArtifactRow(Base):
    """A builder's published build (migration 0013, service/artifacts): the candidate's build directory packed
    and compressed (sandbox/artifacts.py), content-addressed by its build key. Kept in the database because both
    roles reach it already and an artifact is a few MB (the CPU corpus's: under 1 MB; a CUDA extension's .so a few
    MB); artifacts of hundreds of MB would belong in an object store, with this row keeping the digest."""

    __tablename__ = "artifacts"

    build_key: Mapped[str] = mapped_column(String(64), primary_key=True)
    sha256: Mapped[str] = mapped_column(String(64))
    """sha256 of `data` as the builder published it; each job also records the digest it was built with."""
    size: Mapped[int] = mapped_column(BigInteger)
    data: Mapped[bytes] = mapped_column(LargeBinary)
    builder: Mapped[str | None] = mapped_column(String(200))
    created_at: Mapped[dt.datetime] = mapped_column(default=utcnow)


class ProfileRow(Base):
    """A profile asked for with a submission (`profile: true`, migration 0009, service/profiles): Nsight Compute
    run on the candidate's kernels after its verdict, on a GPU worker. Advisory: it never changes the verdict or
    the ranked time, and its device seconds are its own (`gpu_seconds`), not the judging's."""

    __tablename__ = "profiles"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    submission_id: Mapped[str] = mapped_column(ForeignKey("submissions.id"), unique=True)
    """The judged submission (for a batch duplicate, the sample judged in its place)."""
    status: Mapped[str] = mapped_column(String(16), default="pending")
    """pending, then ok, unavailable or failed (sandbox.profiling.report.ProfileStatus)."""
    requested_at: Mapped[dt.datetime] = mapped_column(default=utcnow)
    finished_at: Mapped[dt.datetime | None]
    worker_id: Mapped[str | None] = mapped_column(String(200))
    gpu_seconds: Mapped[float | None] = mapped_column(Float)
    profile: Mapped[dict[str, Any] | None] = mapped_column(JSON)
    """sandbox.profiling.report.Profile, `model_dump(mode="json")`."""
    text: Mapped[str | None] = mapped_column(Text)
    """The profile rendered for a prompt (sandbox.profiling.render), what `generate` feeds back."""
    lease_until: Mapped[dt.datetime | None]
    """While a worker profiles it: until when that worker has it (migration 0011, service/profiles/recovery.py).
    A pending profile whose lease ran out is taken up by another worker."""
    attempts: Mapped[int] = mapped_column(Integer, default=0, server_default="0")
    """How many times a worker took it; after `recovery.ATTEMPTS` it is given up as `unavailable`."""
