"""The rankable verdicts of a task, held in memory and grown by the verdicts recorded since.

Every leaderboard view, its plots and the home page's summaries are computed from one set per task: the
correct verdicts that were timed on a named GPU model, each with its submission's submitter, model and
time (ranking rule 1, service/ranking.py). Reading that set from the database after every new verdict
meant a scan, a join, a sort and two window functions over all of it (~150 ms of PostgreSQL at 10,000
submissions under load), and during a batch run a verdict lands every few seconds, so nearly every page
view paid it. Verdicts are only ever inserted, so the set only grows: a `Pool` reads it whole once, then
only the rows whose id is above the largest it holds.

Ids are not commit-ordered on PostgreSQL: a transaction holding a smaller id may commit after a larger one
was read. So every refresh compares what it holds with the database's count of rankable rows up to its
largest id, and reads the whole set again when they differ (a row was missed, or one was deleted).

Each refresh that finds new rows makes a new, never-changed `Snapshot`: the rows, and per (ranked, strict)
the first verdict of every code (ranking rules 2-4, updated for the new rows alone), so a request ranks from
one consistent snapshot while other threads refresh.
"""

from __future__ import annotations

import datetime as dt
import threading
from dataclasses import dataclass

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from sandbox.verdict import Status
from service.db.models import Submission, VerdictRow


@dataclass(frozen=True, slots=True)
class Rankable:
    """One correct, timed verdict with what ranking needs of its submission."""

    id: int
    device_name: str
    submitter: str
    model: str | None
    submission_id: str
    created_at: dt.datetime
    median_ms: float
    q25_ms: float | None
    q75_ms: float | None
    speedup_eager: float | None
    speedup_compile: float | None
    speed_of_light: float | None
    peak_memory_bytes: int | None
    reference_peak_memory_bytes: int | None
    extra_passed: int | None
    extra_total: int | None
    isolation: str | None
    source: str
    """sha256 of the code judged (the verdict's, else the submission's source): one leaderboard entry per code."""
    unranked_reason: str | None = None
    """Why the verdict itself is not ranked (a card throttled during both timings), or None."""
    ranked: bool = False
    """Judged under bubblewrap and not unranked by its verdict (ranking rule 2); set by `Pool` when the row is read."""
    all_shapes: bool = True
    """Passed every extra shape it was given (ranking rule 3)."""


RANKED_ISOLATION = "bwrap"
"""Verdicts whose isolation mechanism starts with this are ranked; the rest are shown apart."""


def is_ranked_isolation(isolation: str | None) -> bool:
    return bool(isolation) and isolation.startswith(RANKED_ISOLATION)


Code = tuple[str, str]
"""(GPU model, sha256 of the code): one leaderboard entry at most (ranking rule 4)."""
FirstOf = dict[Code, tuple[Rankable, int]]
"""Per code: its first verdict (earliest submission) and how many verdicts of it there are."""


@dataclass(frozen=True)
class Snapshot:
    """The pool at one version; never changed, so a request can rank from it while the pool moves on."""

    rows: tuple[Rankable, ...]
    max_id: int
    firsts: dict[tuple[bool, bool], FirstOf]
    """(ranked, every extra shape passed only) -> the first verdict of each code among those rows."""

    @property
    def version(self) -> tuple[int, int]:
        return len(self.rows), self.max_id


EMPTY = Snapshot((), 0, {(r, s): {} for r in (True, False) for s in (True, False)})


def _with(firsts: dict[tuple[bool, bool], FirstOf], rows: tuple[Rankable, ...]) -> dict[tuple[bool, bool], FirstOf]:
    """`firsts` updated for new `rows`: copies of the maps they touch (a snapshot is never changed)."""
    out = dict(firsts)
    copied: set[tuple[bool, bool]] = set()
    for row in rows:
        for strict in (False, True):
            if strict and not row.all_shapes:
                continue
            key = (row.ranked, strict)
            if key not in copied:
                out[key], copied = dict(out[key]), copied | {key}
            code = (row.device_name, row.source)
            held = out[key].get(code)
            if held is None:
                out[key][code] = (row, 1)
            else:
                first = held[0] if (held[0].created_at, held[0].submission_id) <= (row.created_at, row.submission_id) \
                    else row
                out[key][code] = (first, held[1] + 1)
    return out


def _rankable(task: str) -> tuple:
    return (VerdictRow.task_id == task, VerdictRow.status == Status.CORRECT, VerdictRow.median_ms.is_not(None),
            VerdictRow.device_name.is_not(None))


def fetch_query(task: str, above: int = 0):  # noqa: ANN201 - a SQLAlchemy Select
    """The task's rankable rows with an id above `above` (scripts/bench/bench_pages.py prints its plan)."""
    return (select(VerdictRow.id, VerdictRow.device_name, Submission.submitter, Submission.model,
                   Submission.id, Submission.created_at, VerdictRow.median_ms, VerdictRow.q25_ms, VerdictRow.q75_ms,
                   VerdictRow.speedup_eager, VerdictRow.speedup_compile, VerdictRow.speed_of_light,
                   VerdictRow.peak_memory_bytes, VerdictRow.reference_peak_memory_bytes, VerdictRow.extra_passed,
                   VerdictRow.extra_total, VerdictRow.isolation,
                   func.coalesce(VerdictRow.source_sha256, Submission.text_sha256), VerdictRow.unranked_reason)
            .join(Submission, Submission.id == VerdictRow.submission_id)
            .where(*_rankable(task), VerdictRow.id > above))


def count_query(task: str, up_to: int):  # noqa: ANN201 - a SQLAlchemy Select
    """How many of the task's rankable rows have an id up to `up_to` (an index-only scan: migration 0007)."""
    return select(func.count()).where(*_rankable(task), VerdictRow.id <= up_to)


def _row(values: tuple) -> Rankable:
    extra_passed, extra_total, isolation = values[14:17]
    passed = extra_total is None or (extra_passed is not None and extra_passed >= extra_total)
    return Rankable(*values, is_ranked_isolation(isolation) and values[18] is None, passed)


class Pool:
    """One task's rankable verdicts; `refresh` returns a snapshot whose version changes exactly when the set does."""

    def __init__(self, task: str) -> None:
        self.task = task
        self.snapshot = EMPTY
        self.full_reads = 0
        """Times the whole set was read (tests and benchmarks: a steady state reads only new rows)."""
        self._lock = threading.Lock()
        self._table_version: tuple | None = None

    @property
    def rows(self) -> tuple[Rankable, ...]:
        return self.snapshot.rows

    @property
    def version(self) -> tuple[int, int]:
        return self.snapshot.version

    def refresh(self, session: Session, table_version: tuple | None = None) -> Snapshot:
        """Bring the set up to date: the rows above the largest id held, then one count to check that nothing
        at or below it was missed (a smaller id committed late) or removed; a whole read if something was.

        `table_version`, the verdicts table's (row count, largest id) read by the caller before this: when it
        is the one the last refresh was given, no verdict of any task was recorded since, and nothing is read."""
        with self._lock:
            if table_version is not None and table_version == self._table_version:
                return self.snapshot
            self._table_version = table_version
            held = self.snapshot
            new = self._read(session, held.max_id) if self.full_reads else ()
            rows = held.rows + new
            largest = max(held.max_id, max((r.id for r in new), default=0))
            if self.full_reads and session.execute(count_query(self.task, largest)).scalar_one() == len(rows):
                if new:
                    self.snapshot = Snapshot(rows, largest, _with(held.firsts, new))
                return self.snapshot
            rows = self._read(session, 0)  # one statement: one consistent set
            self.full_reads += 1
            self.snapshot = Snapshot(rows, max((r.id for r in rows), default=0), _with(EMPTY.firsts, rows))
            return self.snapshot

    def _read(self, session: Session, above: int) -> tuple[Rankable, ...]:
        return tuple(_row(values) for values in session.execute(fetch_query(self.task, above)))


class Pools:
    """The pools of one app (its `state`), one per task, created on first use."""

    def __init__(self) -> None:
        self._pools: dict[str, Pool] = {}
        self._lock = threading.Lock()

    def get(self, task: str) -> Pool:
        with self._lock:
            return self._pools.setdefault(task, Pool(task))
