"""Infrastructure failures that wait for their cause to pass instead of spending a job's retries.

A system_error whose verdict names a lasting cause of the host's (`details["infrastructure_kind"]`; today the
judge's full build disk, sandbox/build/compiler.py `DISK_FULL`) says nothing about the candidate, and judging the
job again at once fails the same way for as long as the cause lasts. Counted as an ordinary system_error, its
retries (`RetryPolicy.max_attempts`, 30 s then 60 s apart) are spent within minutes and the job is stored as a
final system_error, never judged again once an operator frees space. Such a job is instead requeued to wait: the
first wait is the ordinary retry's backoff, each later one twice the last, up to `Waits.cap_s`, for at most
`Waits.max_waits` waits (an hour and a quarter at the defaults), counted apart from its system_errors. Past that the
system_error is stored as final, its diagnosis saying the cause outlasted every wait: a disk nobody frees must not
keep a job (and its submitter) waiting for ever.

A wait ends its claim as `AttemptOutcome.DISK_FULL`: the job's waits are counted from its claims (no column of
their own), and /metrics reports the jobs waiting now (`waiting_now`). A build stall of the host's is no such
cause: it passes by itself and stays an ordinary retried system_error (sandbox/build/stall.py).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from sqlalchemy import func, select
from sqlalchemy.orm import Session, aliased

from sandbox.build.compiler import DISK_FULL
from sandbox.verdict import Status, Verdict
from service.db.models import Job, JobAttempt
from service.queue.states import AttemptOutcome, JobState

log = logging.getLogger(__name__)

CAUSES = {DISK_FULL: AttemptOutcome.DISK_FULL}
"""The lasting causes a job waits for, each with the outcome that ends a claim which waited for it."""


@dataclass(frozen=True)
class Waits:
    """How long a job waits for a lasting cause to pass, and how often."""

    max_waits: int = 10
    """Waits before the system_error is stored as final."""
    cap_s: float = 900.0
    """The longest single wait: once the cause is gone, a job is judged again within this."""

    def delay(self, waits: int, first_s: float) -> float | None:
        """Seconds before judging again a job that has now waited `waits` times (this one included), the first
        `first_s`; None when the waits are spent."""
        if waits > self.max_waits:
            return None
        return min(self.cap_s, first_s * 2 ** (waits - 1))


def cause(verdict: Verdict) -> str | None:
    """The lasting cause a system_error names, one of CAUSES, or None (the candidate's verdict, or an ordinary
    system_error)."""
    if verdict.status is not Status.SYSTEM_ERROR:
        return None
    kind = verdict.details.get("infrastructure_kind")
    return kind if kind in CAUSES else None


def waits_so_far(session: Session, job_id: int, kind: str) -> int:
    """Times the job was requeued to wait for `kind`."""
    return session.scalar(select(func.count()).select_from(JobAttempt)
                          .where(JobAttempt.job_id == job_id, JobAttempt.outcome == CAUSES[kind].value)) or 0


def decide(session: Session, job_id: int, verdict: Verdict, kind: str, waits: Waits,
           first_s: float) -> tuple[float | None, Verdict]:
    """Whether a held job whose judging failed of `kind` (`cause`) waits: the seconds it waits and its failure, or
    None and the final system_error to store once its waits are spent. Logged either way."""
    waited = waits_so_far(session, job_id, kind) + 1
    wait = waits.delay(waited, first_s)
    if wait is not None:
        log.warning("job %s: %s (wait %d/%d), judged again in %.0f s: %s", job_id, kind, waited, waits.max_waits,
                    wait, verdict.diagnosis[:200])
        return wait, verdict
    log.error("job %s: %s outlasted %d waits; stored as a final system_error", job_id, kind, waited - 1)
    return None, outlasted(verdict, kind, waited - 1)


def outlasted(verdict: Verdict, kind: str, waits: int) -> Verdict:
    """The final system_error of a job whose cause outlasted `waits` waits: the failure as the sandbox gave it, said
    to be final and why."""
    diagnosis = (f"not judged: the judge's {kind.replace('_', ' ')} lasted through {waits} waits, so the job is no "
                 f"longer requeued (an operator may submit it again once the cause is gone): {verdict.diagnosis}")
    return verdict.model_copy(update={"diagnosis": diagnosis,
                                      "details": {**verdict.details, "waits": waits, "final": True}})


def waiting_now(session: Session) -> dict[str, int]:
    """Queued jobs whose last claim ended waiting for a cause, by cause (zeros included): /metrics'
    judge_jobs_waiting."""
    later = aliased(JobAttempt)
    query = (select(JobAttempt.outcome, func.count(func.distinct(JobAttempt.job_id)))
             .join(Job, Job.id == JobAttempt.job_id)
             .where(JobAttempt.outcome.in_([o.value for o in CAUSES.values()]), Job.state == JobState.QUEUED,
                    ~select(later.id).where(later.job_id == JobAttempt.job_id, later.id > JobAttempt.id).exists())
             .group_by(JobAttempt.outcome))
    counts = dict(session.execute(query).all())
    return {kind: counts.get(outcome.value, 0) for kind, outcome in CAUSES.items()}
