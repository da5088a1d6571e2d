"""Who may read a submission's source: the one policy, asked by the API and by the pages alike.

The verdict is public; the kernel is not. A source is readable by

1. its submitter (any key minted for the same submitter name) and the admin key, always;
2. anyone, once its submitter made it public (`public: true` when sending, or PATCH /v1/submissions/{id});
3. anyone, once JUDGE_SOURCES_PUBLIC_AFTER has passed, if it was sent before that moment: the operator sets the
   end of a competition, and when it ends every kernel sent during it is published (as GPU MODE shows its
   solutions afterwards). A submission sent after that moment is not part of it and stays private.

Nothing else reveals a source: routes and pages that carry one ask `source_access` (or `can_see_source`) and
show nothing when it says PRIVATE. Nor do its diagnostics, which quote it (compiler errors citing a line, a rule
naming a call, a profile naming its kernels), nor a digest of its text: the same readers see them
(`can_see_diagnostics`); everyone else sees the verdict's status and figures (`without_diagnostics`).
"""

from __future__ import annotations

import datetime as dt
import enum
from dataclasses import dataclass
from typing import Protocol, TypeVar

from sandbox.verdict import Verdict
from service.db.models import utcnow


@dataclass(frozen=True)
class Viewer:
    """Who asks: nobody known (no key), the submitter a key was minted for, or the holder of the admin key."""

    submitter: str | None = None
    admin: bool = False

    @property
    def anonymous(self) -> bool:
        return self.submitter is None and not self.admin


ANONYMOUS = Viewer()
ADMIN = Viewer(admin=True)


class HasSource(Protocol):
    """What the policy reads of a submission (service.db.models.Submission has it)."""

    submitter: str
    public: bool
    created_at: dt.datetime
    """Naive UTC, as stored."""


class SourceAccess(str, enum.Enum):
    """Why a viewer may read a source, or that they may not; the first that applies, in this order."""

    SUBMITTER = "submitter"
    """The viewer sent it."""
    ADMIN = "admin"
    """The viewer holds the admin key."""
    PUBLIC = "public"
    """Its submitter made it public."""
    PUBLISHED = "published"
    """Sent before JUDGE_SOURCES_PUBLIC_AFTER, which has passed."""
    PRIVATE = "private"
    """None of the above: the viewer sees the verdict only."""


def published(submission: HasSource, public_after: dt.datetime | None, now: dt.datetime | None = None) -> bool:
    """Whether the operator's date has published this submission: it has passed, and the submission predates it."""
    if public_after is None:
        return False
    return submission.created_at < public_after <= (now or utcnow())


def source_access(submission: HasSource, viewer: Viewer, public_after: dt.datetime | None,
                  now: dt.datetime | None = None) -> SourceAccess:
    """`public_after` is Settings.sources_public_after (naive UTC, or None); `now` defaults to the clock."""
    if viewer.submitter is not None and viewer.submitter == submission.submitter:
        return SourceAccess.SUBMITTER
    if viewer.admin:
        return SourceAccess.ADMIN
    if submission.public:
        return SourceAccess.PUBLIC
    if published(submission, public_after, now):
        return SourceAccess.PUBLISHED
    return SourceAccess.PRIVATE


def can_see_source(submission: HasSource, viewer: Viewer, public_after: dt.datetime | None,
                   now: dt.datetime | None = None) -> bool:
    return source_access(submission, viewer, public_after, now) is not SourceAccess.PRIVATE


def public_to_all(submission: HasSource, public_after: dt.datetime | None, now: dt.datetime | None = None) -> bool:
    """Whether anyone, without a key, may read the source now."""
    return can_see_source(submission, ANONYMOUS, public_after, now)


# --- diagnostics ---------------------------------------------------------------------------------------------------
# A verdict's diagnostics are made of the source: compile errors quote its lines (`compile_errors[].code`, the
# compiler log), a traceback or a broken rule names its calls, a profile names its kernels, `imports` lists its
# modules, and a digest of the text confirms a guess of it. So who may read the source may read them, and nobody
# else: another key and an anonymous visitor get the status and the figures (timings, speedups, errors of the
# output, stage times, the environment), never text taken from the source nor a digest of it.

WITHHELD = ("the diagnostics of a private submission are shown to its submitter and the admin key only: send its "
            "submitter's key (Authorization: Bearer <key>)")


def can_see_diagnostics(submission: HasSource, viewer: Viewer, public_after: dt.datetime | None,
                        now: dt.datetime | None = None) -> bool:
    return can_see_source(submission, viewer, public_after, now)


VerdictT = TypeVar("VerdictT", bound=Verdict)


def without_diagnostics(verdict: VerdictT) -> VerdictT:
    """The verdict as one who may not read its source sees it: `judged_sha256` is None, so the verdict must be of a
    type that allows it (service.api.schemas.VerdictView)."""
    return verdict.model_copy(update={
        "diagnosis": f"{verdict.status.value}: {WITHHELD}", "judged_sha256": None, "compile_log": None,
        "compile_errors": [], "details": {}, "imports": [],
        "trials": [t.model_copy(update={"message": None}) for t in verdict.trials],
        "extra_shapes": [t.model_copy(update={"message": None}) for t in verdict.extra_shapes]})
