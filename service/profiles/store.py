"""The `profiles` rows. Every function takes the caller's session (the convention of service/crud.py).

States: `pending` (asked for; the submission is not judged, or its worker has not profiled it yet), then once
`ok`, `unavailable` or `failed` (sandbox.profiling.report.ProfileStatus), never again. A batch sample judged in
another's place (`duplicate_of`) shares that sample's profile, as it shares its verdict.
"""

from __future__ import annotations

from sqlalchemy import select, update
from sqlalchemy.orm import Session

from sandbox.profiling.render import render_text
from sandbox.profiling.report import Profile
from service.db.models import ProfileRow, Submission, utcnow

PENDING = "pending"


def request(session: Session, submission_ids: list[str]) -> None:
    """Ask for a profile of each of these (judged) submissions; one already asked for is left as it is."""
    wanted = set(submission_ids)
    if not wanted:
        return
    have = set(session.scalars(select(ProfileRow.submission_id).where(ProfileRow.submission_id.in_(wanted))))
    now = utcnow()
    session.add_all(ProfileRow(submission_id=s, status=PENDING, requested_at=now) for s in sorted(wanted - have))
    session.flush()


def is_pending(session: Session, submission_id: str) -> bool:
    return session.scalar(select(ProfileRow.id).where(ProfileRow.submission_id == submission_id,
                                                      ProfileRow.status == PENDING)) is not None


def record(session: Session, submission_id: str, profile: Profile, worker_id: str) -> bool:
    """Store a finished profile on its pending row; False when there was none pending (another worker's)."""
    done = session.execute(
        update(ProfileRow).where(ProfileRow.submission_id == submission_id, ProfileRow.status == PENDING)
        .values(status=profile.status, finished_at=utcnow(), worker_id=worker_id, gpu_seconds=profile.gpu_seconds,
                profile=profile.model_dump(mode="json"), text=render_text(profile)))
    return bool(done.rowcount)


def for_submission(session: Session, submission_id: str) -> tuple[Submission, ProfileRow | None] | None:
    """The submission and the profile that answers for it (its own, or its batch original's); None when there
    is no such submission."""
    sub = session.get(Submission, submission_id)
    if sub is None:
        return None
    judged = sub.duplicate_of or sub.id
    return sub, session.scalar(select(ProfileRow).where(ProfileRow.submission_id == judged))


def texts(session: Session, submission_ids: list[str]) -> dict[str, str]:
    """The finished profiles' prompt texts of these submissions (a duplicate's is its original's)."""
    subs = session.execute(select(Submission.id, Submission.duplicate_of).where(Submission.id.in_(submission_ids)))
    judged = {sid: dup or sid for sid, dup in subs}
    rows = session.execute(select(ProfileRow.submission_id, ProfileRow.text).where(
        ProfileRow.submission_id.in_(set(judged.values())), ProfileRow.status != PENDING))
    by_judged = {sid: text for sid, text in rows if text}
    return {sid: by_judged[j] for sid, j in judged.items() if j in by_judged}
