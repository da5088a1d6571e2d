"""Who profiles a pending profile, and what happens when that worker stops before it has.

A profile is taken after its verdict is stored (service/worker/runner.py), so a worker that stops or dies between
the two leaves it pending, and `kernel-judge profile ID --wait` would wait for ever. Two rules close that gap:

- **A lease.** A worker takes the profile (`take`) before it runs the profiler: the row names the worker and holds
  `lease_until`, long enough for the profiler's own wall limit (sandbox.profiling.run.TIME_LIMIT_S) and the
  candidate's build, so no heartbeat is needed. Two workers never profile the same submission at once.
- **Recovery.** An idle worker looks for a pending profile whose submission has its verdict and that nobody holds:
  a lease that ran out (the worker died while profiling), or none taken `unclaimed_after_s` after the verdict (the
  worker stopped between the verdict and the profile). It takes it (`take_orphan`) and profiles it itself: it builds
  the submission again (a build-cache hit where the build is still cached) and runs it on its own device.

`ATTEMPTS` bounds how often one profile is taken: a candidate that kills the profiler's worker every time ends as
`unavailable` with the reason, not in a loop. A verdict with nothing to profile (the candidate did not run to the
end) ends as `unavailable` when found, as the worker does at the verdict.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass

from pydantic import ValidationError
from sqlalchemy import or_, select, update
from sqlalchemy.orm import Session

from sandbox.profiling.report import Profile
from sandbox.profiling.run import TIME_LIMIT_S
from sandbox.verdict import Status, Verdict
from service.db.models import ProfileRow, Submission, VerdictRow, utcnow
from service.profiles.store import PENDING, record

ATTEMPTS = 3
"""Times one profile may be taken before it is given up: a worker lost once is bad luck, three times is the
candidate."""
LEASE_S = TIME_LIMIT_S + 120.0
"""The profiler's wall limit, plus a build of the candidate (a recovering worker builds it again) and margin."""
PROFILED = frozenset({Status.CORRECT, Status.INCORRECT})
"""Verdicts whose candidate ran its forward calls to the end: the ones with kernels worth profiling."""


def not_run(status: Status, device: str | None = None) -> Profile:
    """The profile of a verdict whose candidate did not run its forward calls to the end: none, and why (the one
    wording, whether the judging worker or a recovering one records it)."""
    return Profile(status="unavailable", device=device, reason="not profiled: the candidate was not run to the end "
                   f"of its timing (verdict: {status.value})")


@dataclass(frozen=True, kw_only=True)
class Orphan:
    """A pending profile taken up by a worker that did not judge it: what it needs to build and run the candidate."""

    submission_id: str
    task_id: str
    source: str
    verdict: Verdict | None
    """The stored verdict, whose measured call time bounds the profile's wall limit (None: unreadable)."""


def take(session: Session, submission_id: str, worker_id: str, *, lease_s: float = LEASE_S) -> bool:
    """Take the pending profile of this submission for `lease_s`; False when there is none pending, or another
    worker holds it."""
    now = utcnow()
    taken = session.execute(
        update(ProfileRow)
        .where(ProfileRow.submission_id == submission_id, ProfileRow.status == PENDING,
               or_(ProfileRow.lease_until.is_(None), ProfileRow.lease_until < now))
        .values(worker_id=worker_id, lease_until=now + dt.timedelta(seconds=lease_s),
                attempts=ProfileRow.attempts + 1))
    return bool(taken.rowcount)


def take_orphan(session: Session, worker_id: str, *, unclaimed_after_s: float, lease_s: float = LEASE_S,
                look_at: int = 8) -> Orphan | None:
    """Take one pending profile that its judging worker left behind (see the module docstring), oldest first.

    Those already taken `ATTEMPTS` times, and those whose verdict ran nothing to profile, are finished as
    `unavailable` on the way. None: there is nothing to take up."""
    now = utcnow()
    rows = session.execute(
        select(ProfileRow.submission_id, ProfileRow.attempts, VerdictRow.status, Submission.task_id,
               Submission.source)
        .join(VerdictRow, VerdictRow.submission_id == ProfileRow.submission_id)
        .join(Submission, Submission.id == ProfileRow.submission_id)
        .where(ProfileRow.status == PENDING,
               or_(ProfileRow.lease_until < now,
                   (ProfileRow.lease_until.is_(None))
                   & (VerdictRow.created_at < now - dt.timedelta(seconds=unclaimed_after_s))))
        .order_by(ProfileRow.id).limit(look_at)).all()
    for submission_id, attempts, status, task_id, source in rows:
        if status not in PROFILED:
            record(session, submission_id, not_run(status), worker_id)
        elif attempts >= ATTEMPTS:
            record(session, submission_id, Profile(
                status="unavailable", reason=f"not profiled: profiling was started {attempts} times and never "
                "finished (its worker stopped each time); submit again with profile to try anew"), worker_id)
        elif take(session, submission_id, worker_id, lease_s=lease_s):
            stored = session.scalar(select(VerdictRow.verdict).where(VerdictRow.submission_id == submission_id))
            return Orphan(submission_id=submission_id, task_id=task_id, source=source, verdict=_verdict(stored))
    return None


def _verdict(stored: object) -> Verdict | None:
    try:
        return Verdict.model_validate(stored)
    except ValidationError:  # a verdict stored by an older judge: the profile gets the default limit
        return None


def give_back(session: Session, submission_id: str, worker_id: str) -> None:
    """A worker that stops before profiling what it took: the profile is free again at once, and this taking is not
    counted against `ATTEMPTS` (the candidate did nothing)."""
    session.execute(
        update(ProfileRow)
        .where(ProfileRow.submission_id == submission_id, ProfileRow.status == PENDING,
               ProfileRow.worker_id == worker_id)
        .values(lease_until=None, attempts=ProfileRow.attempts - 1))
