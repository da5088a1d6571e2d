"""The database side of batches: admission, the batch view, result pages, metrics rows, cancel.

Every function takes the caller's Session and never commits: the caller decides the transaction.

A sample is a `submissions` row with `batch_id` and `line`. A judged sample also has a job (claimed like any
other, in fair order: service.batches.fairness) and, once done, a verdict. A duplicate (service.batches.dedup)
has neither: it points at the judged submission (`duplicate_of`) and every read here joins through
`coalesce(duplicate_of, id)`, so it shows that submission's job state and verdict, marked as a duplicate.
"""

from __future__ import annotations

import datetime as dt
import hashlib
from collections.abc import Mapping
from dataclasses import dataclass, field

from sqlalchemy import func, insert, select, update
from sqlalchemy.orm import Session

from sandbox.verdict import Status
from service import visibility
from service.batches.dedup import CodeKey, code_key
from service.batches.fairness import virtual_time
from service.batches.metrics import Outcome, summarize
from service.batches.schemas import (
    BatchList,
    BatchOut,
    LineError,
    Metrics,
    ResultRow,
    Sample,
)
from service.db.models import ApiKey, Batch, Job, Submission, VerdictRow, new_id, utcnow
from service.profiles import store as profiles
from service.queue import capability, wakeup
from service.queue.states import FINAL, JobState

RAN = frozenset({Status.RUNTIME_ERROR, Status.TIMEOUT, Status.INCORRECT, Status.TAMPER_DETECTED, Status.CORRECT})
"""Verdicts only a built, loaded candidate can get: it compiled."""

DIAGNOSIS_CHARS = 300


def aware(value: dt.datetime | None) -> dt.datetime | None:
    """Stored times are naive UTC; the API says so."""
    return value.replace(tzinfo=dt.timezone.utc) if value is not None else None


def compiled(status: Status | None, compile_stage_s: float | None) -> bool | None:
    """Whether the candidate compiled, from its verdict: a policy breach or judge failure compiled only if the
    pipeline reached its compile stage (a static breach is caught before building)."""
    if status is None:
        return None
    if status in RAN:
        return True
    return status in (Status.POLICY_VIOLATION, Status.SYSTEM_ERROR) and compile_stage_s is not None


# --- admission -------------------------------------------------------------------------------------

class NoSamples(Exception):
    """Nothing in the upload could be accepted; `rejected` says why, line by line."""

    def __init__(self, rejected: list[LineError]) -> None:
        super().__init__(f"{len(rejected)} line(s) rejected, none accepted")
        self.rejected = rejected


@dataclass(frozen=True)
class Admitted:
    line: int
    submission_id: str
    duplicate_of: str | None
    code: CodeKey


@dataclass
class Created:
    batch: Batch
    samples: list[Admitted] = field(default_factory=list)
    rejected: list[LineError] = field(default_factory=list)

    @property
    def duplicates(self) -> int:
        return sum(s.duplicate_of is not None for s in self.samples)


def unfinished_batch_jobs(session: Session, key_id: str) -> int:
    """Batch jobs of this key not yet final (the batch queue quota)."""
    return session.scalar(select(func.count()).select_from(Job).join(Submission, Submission.id == Job.submission_id)
                          .where(Submission.api_key_id == key_id, Submission.batch_id.is_not(None),
                                 Job.state.not_in(FINAL))) or 0


def _unknown_parents(session: Session, samples: list[tuple[int, Sample]]) -> set[str]:
    wanted = sorted({s.parent_id for _, s in samples if s.parent_id is not None})  # "" names no submission either
    found: set[str] = set()
    for start in range(0, len(wanted), 500):
        chunk = wanted[start:start + 500]
        found.update(session.scalars(select(Submission.id).where(Submission.id.in_(chunk))))
    return set(wanted) - found


def create_batch(session: Session, key: ApiKey, samples: list[tuple[int, Sample]], *, name: str | None,
                 tags: list[str], kind: str = "batch", rejected: list[LineError] | None = None,
                 codes: Mapping[int, CodeKey] | None = None) -> Created:
    """Store the samples and queue one job per distinct (task, extracted code); raises NoSamples if none is
    left after checking parent ids. Inserts in bulk: a 10,000-line batch is two INSERT statements.

    `codes` are the samples' dedup keys by line, computed before the transaction (service.batches.parse.Parsed
    does): extraction is CPU work that must not hold the write lock. Without them they are computed here."""
    rejected = list(rejected or [])
    missing = _unknown_parents(session, samples)
    good = []
    for line, sample in samples:
        if sample.parent_id in missing:
            rejected.append(LineError(line=line, error=f"parent_id {sample.parent_id!r} is not a submission"))
        else:
            good.append((line, sample))
    rejected.sort(key=lambda e: e.line)
    if not good:
        raise NoSamples(rejected)

    now = utcnow()
    batch = Batch(id=new_id(), name=name, kind=kind, api_key_id=key.id, submitter=key.submitter, tags=tags,
                  total=len(good), duplicates=0, rejected=[r.model_dump() for r in rejected], created_at=now)
    session.add(batch)
    session.flush()
    start = virtual_time(session)
    created = Created(batch, rejected=rejected)
    first: dict[CodeKey, str] = {}
    subs, jobs = [], []
    for line, sample in good:
        text = sample.text
        key_ = codes[line] if codes is not None else code_key(sample.task, text)
        sub_id, original = new_id(), first.get(key_)
        if original is None:
            first[key_] = sub_id
            jobs.append({"submission_id": sub_id, "task_id": sample.task, "state": JobState.QUEUED, "not_before": now,
                         "queued_at": now, "claims": 0, "crashes": 0, "system_errors": 0,
                         "fair_key": start + len(jobs), **capability.job_needs(text)})
        subs.append({"id": sub_id, "task_id": sample.task, "source": text,
                     "text_sha256": hashlib.sha256(text.encode("utf-8")).hexdigest(), "api_key_id": key.id,
                     "submitter": key.submitter, "idempotency_key": None, "model": sample.model,
                     "sample_index": sample.sample_index, "sampling": sample.sampling, "tags": sample.tags or tags,
                     "created_at": now, "batch_id": batch.id, "line": line, "duplicate_of": original,
                     "parent_id": sample.parent_id, "turn": sample.turn, "sample_metadata": sample.metadata or None,
                     "public": sample.public})
        created.samples.append(Admitted(line, sub_id, original, key_))
    session.execute(insert(Submission), subs)
    session.execute(insert(Job), jobs)
    # A sample judged in another's place is profiled there: the judged sample's row answers for both.
    profiles.request(session, [a.duplicate_of or a.submission_id for a, (_, s) in zip(created.samples, good)
                               if s.profile])
    batch.duplicates = created.duplicates
    session.flush()
    wakeup.announce(session)
    return created


# --- reading ---------------------------------------------------------------------------------------

def _judged():
    """The submission whose job and verdict a sample shows: itself, or the one it duplicates."""
    return func.coalesce(Submission.duplicate_of, Submission.id)


def _compile_stage():
    return VerdictRow.verdict[("stages", "compile")].as_float()


def open_jobs(session: Session, batch_id: str) -> int:
    """Judged jobs of the batch not yet final."""
    return session.scalar(select(func.count()).select_from(Job).join(Submission, Submission.id == Job.submission_id)
                          .where(Submission.batch_id == batch_id, Job.state.not_in(FINAL))) or 0


def outcomes(session: Session, batch_id: str) -> list[Outcome]:
    """Every sample of the batch as the metrics see it (small tuples; the sources are not loaded)."""
    judged = _judged()
    rows = session.execute(
        select(Submission.task_id, Submission.model, VerdictRow.status, VerdictRow.speedup_eager,
               VerdictRow.speedup_compile, _compile_stage().label("compile_s"))
        .select_from(Submission).outerjoin(VerdictRow, VerdictRow.submission_id == judged)
        .where(Submission.batch_id == batch_id).order_by(Submission.line))
    return [Outcome(task=r.task_id, model=r.model, status=r.status, compiled=bool(compiled(r.status, r.compile_s)),
                    speedup_eager=r.speedup_eager, speedup_compile=r.speedup_compile) for r in rows]


def results_page(session: Session, batch_id: str, after_line: int, limit: int, *, viewer: visibility.Viewer,
                 public_after: dt.datetime | None) -> list[ResultRow]:
    """Up to `limit` result rows after `after_line`, in line order (keyset paging: cheap at any depth); a row's
    diagnosis only where `viewer` may read its diagnostics (service/visibility.py)."""
    judged = _judged()
    rows = session.execute(
        select(Submission.line, Submission.id, Submission.task_id, Submission.model, Submission.sample_index,
               Submission.turn, Submission.parent_id, Submission.duplicate_of, Submission.sample_metadata,
               Submission.submitter, Submission.public, Submission.created_at,
               Job.state, VerdictRow.status, VerdictRow.median_ms, VerdictRow.speedup_eager,
               VerdictRow.speedup_compile, VerdictRow.speed_of_light,
               func.substr(VerdictRow.diagnosis, 1, DIAGNOSIS_CHARS).label("diagnosis"),
               _compile_stage().label("compile_s"))
        .select_from(Submission).outerjoin(Job, Job.submission_id == judged)
        .outerjoin(VerdictRow, VerdictRow.submission_id == judged)
        .where(Submission.batch_id == batch_id, Submission.line > after_line)
        .order_by(Submission.line).limit(limit))
    return [ResultRow(line=r.line, submission_id=r.id, task=r.task_id, model=r.model, sample_index=r.sample_index,
                      turn=r.turn, parent_id=r.parent_id, state=r.state,
                      status=r.status.value if r.status is not None else None, duplicate_of=r.duplicate_of,
                      median_ms=r.median_ms, speedup_eager=r.speedup_eager, speedup_compile=r.speedup_compile,
                      speed_of_light_fraction=r.speed_of_light, compiled=compiled(r.status, r.compile_s),
                      correct=(r.status is Status.CORRECT) if r.status is not None else None,
                      diagnosis=r.diagnosis if visibility.can_see_diagnostics(r, viewer, public_after) else None,
                      metadata=r.sample_metadata)
            for r in rows]


def batch_view(session: Session, batch: Batch, *, with_metrics: bool = True) -> BatchOut:
    """State, counts by job state and by verdict, progress, ETA and (optionally) the overall metrics."""
    judged = _judged()
    counts = dict(session.execute(
        select(Job.state, func.count()).join(Submission, Submission.id == Job.submission_id)
        .where(Submission.batch_id == batch.id).group_by(Job.state)).all())
    per_sample = session.execute(
        select(Job.state, VerdictRow.status, func.count()).select_from(Submission)
        .join(Job, Job.submission_id == judged).outerjoin(VerdictRow, VerdictRow.submission_id == judged)
        .where(Submission.batch_id == batch.id).group_by(Job.state, VerdictRow.status)).all()
    first_start, last_finish = session.execute(
        select(func.min(Job.compile_started_at), func.max(Job.finished_at))
        .join(Submission, Submission.id == Job.submission_id).where(Submission.batch_id == batch.id)).one()

    verdicts: dict[str, int] = {}
    final_samples = 0
    for state, status, n in per_sample:
        if status is not None:
            verdicts[status.value] = verdicts.get(status.value, 0) + n
        if state in FINAL:
            final_samples += n
    open_ = sum(n for state, n in counts.items() if state not in FINAL)
    state = "cancelled" if batch.cancelled_at else ("running" if open_ else "done")
    eta = None
    done = counts.get(JobState.DONE, 0)
    if open_ and done and first_start is not None:
        elapsed = (utcnow() - first_start).total_seconds()
        eta = round(open_ * elapsed / done, 1) if elapsed > 0 else None
    metrics = Metrics(**summarize(outcomes(session, batch.id))) if with_metrics else None
    return BatchOut(
        id=batch.id, name=batch.name, kind=batch.kind, submitter=batch.submitter, tags=batch.tags, state=state,
        created_at=aware(batch.created_at), finished_at=aware(last_finish) if not open_ else None,
        cancelled_at=aware(batch.cancelled_at), total=batch.total,
        counts={s.value: n for s, n in sorted(counts.items(), key=lambda kv: kv[0].value)},
        verdicts=dict(sorted(verdicts.items())), duplicates=batch.duplicates,
        rejected=[LineError(**r) for r in batch.rejected],
        progress=round(final_samples / batch.total, 4) if batch.total else 1.0, eta_s=eta, metrics=metrics,
        url=f"/v1/batches/{batch.id}")


def list_batches(session: Session, key_id: str, limit: int, cursor: str | None, offset: int) -> BatchList:
    """The key's batches, newest first; `cursor` is the id of the last batch of the previous page."""
    query = select(Batch).where(Batch.api_key_id == key_id)
    if cursor:
        last = session.get(Batch, cursor)
        if last is None or last.api_key_id != key_id:
            raise LookupError(f"unknown cursor {cursor!r}: pass the next_cursor of the previous page")
        query = query.where((Batch.created_at < last.created_at)
                            | ((Batch.created_at == last.created_at) & (Batch.id < last.id)))
    rows = list(session.scalars(query.order_by(Batch.created_at.desc(), Batch.id.desc()).offset(offset)
                                .limit(limit + 1)))
    more = len(rows) > limit
    rows = rows[:limit]
    return BatchList(items=[batch_view(session, b, with_metrics=False) for b in rows],
                     next_cursor=rows[-1].id if more and rows else None)


def cancel_batch(session: Session, batch: Batch) -> int:
    """Cancel the batch's queued jobs (they never run); claimed ones finish. Returns how many were cancelled.
    The UPDATE is conditional on `state = queued`, so a job a worker claims concurrently is either claimed
    first (the row lock / SQLite's write lock orders them) and runs, or cancelled and never claimed."""
    if batch.cancelled_at is None and not open_jobs(session, batch.id):
        return 0  # already done: nothing to cancel, and the batch stays "done"
    now = utcnow()
    if batch.cancelled_at is None:
        batch.cancelled_at = now
    ids = select(Submission.id).where(Submission.batch_id == batch.id).scalar_subquery()
    result = session.execute(update(Job).where(Job.submission_id.in_(ids), Job.state == JobState.QUEUED)
                             .values(state=JobState.CANCELLED, finished_at=now, lease_expires_at=None)
                             .execution_options(synchronize_session=False))
    session.flush()
    return result.rowcount
