"""Fair claim order: an interactive submission never waits behind a batch, and batches share the workers.

Workers claim ready jobs ordered by `(jobs.fair_key NULLS FIRST, jobs.id)` (service.queue.claims.claim):

- An interactive submission (POST /v1/submissions) has no fair_key: it is claimed before every batch job, so
  it waits at most for the jobs workers already hold, whatever the size of the batches queued. (Interactive
  traffic is bounded by the per-key rate limit and queue quota, so it cannot starve batches for long.)
- A batch job's fair_key is its virtual start time (start-time fair queueing): the batch's judged samples
  get `V, V + 1, V + 2, ...` where V, the queue's virtual time, is the smallest fair_key still queued (0 on
  an empty queue). A batch arriving while a 10,000-job batch is half done therefore interleaves with it one
  to one instead of waiting for it, and k concurrent batches each get 1/k of the claims, FIFO within each.

It is a pure ordering column: claiming stays one `SELECT ... FOR UPDATE SKIP LOCKED` (PostgreSQL) or one
`BEGIN IMMEDIATE` transaction (SQLite), as safe as before; no per-claim aggregation.
"""

from __future__ import annotations

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from service.db.models import Job
from service.queue.states import JobState


def virtual_time(session: Session) -> int:
    """The fair_key the next batch starts at: the smallest one still queued, or 0 when none is."""
    return session.scalar(select(func.min(Job.fair_key)).where(Job.state == JobState.QUEUED,
                                                               Job.fair_key.is_not(None))) or 0
