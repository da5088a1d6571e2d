"""A batch's samples as its page shows them: one row per sample, filtered by outcome, a page at a time, and
what a reader needs around them (samples per outcome, distinct correct kernels, what the verdicts were
measured at, and what a cancel left behind).

A sample's outcome is its verdict's status (a duplicate shows the verdict of the sample it repeats, as every
read in service.batches.store does), else `cancelled` when its job was cancelled before it ran, else
`pending`. Every function reads through the caller's database handle and writes nothing; rows come in line
order, so a page follows the upload.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass

from sqlalchemy import func, select
from sqlalchemy.orm import Session, aliased

from sandbox.verdict import Status
from service.batches.store import aware
from service.db.models import Batch, Job, Submission, VerdictRow
from service.queue.states import JobState
from service.web.measured import Measured, from_columns, shape_column

PENDING, CANCELLED = "pending", "cancelled"
OUTCOMES = tuple(s.value for s in Status) + (PENDING, CANCELLED)
"""What the page filters by (`?status=`): the verdict statuses, and the two states of a sample without one."""

PAGE_SIZE = 100
"""Samples per page: a batch holds up to Settings.max_batch_samples (10,000) of them."""


@dataclass(frozen=True)
class SampleRow:
    line: int
    submission_id: str
    task: str
    model: str | None
    sample_index: int | None
    outcome: str
    duplicate_of_line: int | None
    """The line of the sample this one repeats (same extracted code, one shared verdict)."""
    median_ms: float | None
    speedup_eager: float | None
    speedup_compile: float | None


@dataclass(frozen=True)
class Cancellation:
    """What a cancel left: samples judged by then, judged after (their job was already running), never run."""

    at: dt.datetime
    judged_before: int
    judged_after: int
    never_ran: int


def _judged():  # noqa: ANN202 - a SQL expression
    """The submission whose job and verdict a sample shows: itself, or the one it duplicates."""
    return func.coalesce(Submission.duplicate_of, Submission.id)


def _samples(*columns):  # noqa: ANN002, ANN202 - a SQLAlchemy Select
    judged = _judged()
    return (select(*columns).select_from(Submission)
            .outerjoin(Job, Job.submission_id == judged).outerjoin(VerdictRow, VerdictRow.submission_id == judged))


def _outcome(status: Status | None, state: JobState | None) -> str:
    if status is not None:
        return status.value
    return CANCELLED if state is JobState.CANCELLED else PENDING


def _where(outcome: str):  # noqa: ANN202 - a SQL expression
    if outcome == CANCELLED:
        return VerdictRow.id.is_(None) & (Job.state == JobState.CANCELLED)
    if outcome == PENDING:
        return VerdictRow.id.is_(None) & (Job.state.is_(None) | (Job.state != JobState.CANCELLED))
    return VerdictRow.status == Status(outcome)


def outcome_counts(session: Session, batch_id: str) -> dict[str, int]:
    """Samples per outcome (duplicates counted with the verdict they share), in OUTCOMES order."""
    counts: dict[str, int] = {}
    rows = session.execute(_samples(VerdictRow.status, Job.state, func.count())
                           .where(Submission.batch_id == batch_id).group_by(VerdictRow.status, Job.state))
    for status, state, n in rows:
        outcome = _outcome(status, state)
        counts[outcome] = counts.get(outcome, 0) + n
    return {o: counts[o] for o in OUTCOMES if o in counts}


def page(session: Session, batch_id: str, outcome: str | None, number: int) -> list[SampleRow]:
    """Page `number` (from 1) of the samples with this outcome (all when None), PAGE_SIZE a page."""
    original = aliased(Submission)
    query = (_samples(Submission.line, Submission.id, Submission.task_id, Submission.model, Submission.sample_index,
                      VerdictRow.status, Job.state, original.line.label("original_line"), VerdictRow.median_ms,
                      VerdictRow.speedup_eager, VerdictRow.speedup_compile)
             .outerjoin(original, original.id == Submission.duplicate_of)
             .where(Submission.batch_id == batch_id))
    if outcome is not None:
        query = query.where(_where(outcome))
    rows = session.execute(query.order_by(Submission.line).offset((number - 1) * PAGE_SIZE).limit(PAGE_SIZE))
    return [SampleRow(line=r.line, submission_id=r.id, task=r.task_id, model=r.model, sample_index=r.sample_index,
                      outcome=_outcome(r.status, r.state), duplicate_of_line=r.original_line, median_ms=r.median_ms,
                      speedup_eager=r.speedup_eager, speedup_compile=r.speedup_compile)
            for r in rows]


def correct_kernels(session: Session, batch_id: str) -> int:
    """Distinct kernels among the correct samples: the sha256 of the code the judge ran (after extraction from
    a completion), per task. Duplicates share their original's verdict, so they are one kernel with it."""
    codes = (_samples(VerdictRow.task_id, VerdictRow.source_sha256)
             .where(Submission.batch_id == batch_id, VerdictRow.status == Status.CORRECT).distinct().subquery())
    return session.scalar(select(func.count()).select_from(codes)) or 0


def measured(session: Session, batch_id: str) -> list[Measured]:
    """The shapes and devices the batch's timed verdicts were measured at (usually one)."""
    rows = session.execute(_samples(VerdictRow.device_name, VerdictRow.device, shape_column())
                           .where(Submission.batch_id == batch_id, VerdictRow.median_ms.is_not(None)).distinct())
    return sorted({from_columns(r.device_name, r.device, r.shape) for r in rows},
                  key=lambda m: (m.device_name, m.device, m.shape or ()))


def cancellation(session: Session, batch: Batch) -> Cancellation | None:
    """For a cancelled batch: when, and how many samples had a verdict by then (None when not cancelled)."""
    if batch.cancelled_at is None:
        return None
    by_then = VerdictRow.created_at <= batch.cancelled_at
    before, after, never = session.execute(_samples(
        func.count(VerdictRow.id).filter(by_then), func.count(VerdictRow.id).filter(~by_then),
        func.count().filter(VerdictRow.id.is_(None) & (Job.state == JobState.CANCELLED)))
        .where(Submission.batch_id == batch.id)).one()
    return Cancellation(at=aware(batch.cancelled_at), judged_before=before, judged_after=after, never_ran=never)
