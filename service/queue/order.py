"""Which of the ready jobs a claim takes: longest expected device time first, within a bounded window.

The fair order (service.batches.fairness: interactive jobs by id, then batch jobs by virtual start time) says who
is owed the next claim. Taken strictly, it ends a batch badly on several GPUs: a long job claimed last keeps one
GPU busy while the others idle. Longest-processing-time-first (LPT) starts the long jobs early so the short ones
fill the end. Unbounded, LPT starves: a short job waits as long as longer jobs keep arriving. So the reordering is
bounded by position, not by time (a time bound would switch LPT off exactly in the long backlogs whose end it is
for):

- a job's *position* is its tier (interactive before batch, as in the fair order) and its place in that tier
  (`jobs.id` for interactive jobs, `jobs.fair_key` for batch jobs);
- the *head* is the first ready job in the fair order; a claim may take any ready job of the head's tier whose
  place is less than the head's plus `window`, and takes the longest of them (the earliest in fair order among
  equals).

Since the head stays the head until it is claimed, a job can be overtaken only by jobs of its own tier whose place
is less than its own plus `window`: at most window - 1 jobs of its batch (more only where several batches share
virtual start times, one per batch and slot, as the fair order interleaves them anyway), or window - 1 submissions
made after it. A job that another worker's claim holds locked at that very instant (`SKIP LOCKED`) is invisible to
this claim, which may then take a job beyond the window: the bound holds between claims, not inside their
overlap. `window` <= 1 is the plain fair order.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TypeVar

from service.db.models import Job

J = TypeVar("J", bound=Job)


def position(job: Job) -> tuple[int, int]:
    """(tier, place): interactive jobs (no fair_key) by id in tier 0, batch jobs by fair_key in tier 1."""
    return (0, job.id) if job.fair_key is None else (1, job.fair_key)


def fair_order(job: Job) -> tuple[bool, int, int]:
    """The fair order as a sort key: interactive jobs (no fair_key) first, by id; then batch jobs by (fair_key, id)."""
    return (job.fair_key is not None, job.fair_key or 0, job.id)


def longest_first(ready: Sequence[J], limit: int, seconds: Callable[[str], float], window: int) -> list[J]:
    """Up to `limit` of `ready` (given in fair order) to claim, in the order taken: repeatedly the longest job
    (by `seconds(task_id)`) within `window` places of the current head's tier and place."""
    remaining = list(ready)
    taken: list[J] = []
    while remaining and len(taken) < limit:
        tier, place = position(remaining[0])
        eligible = [j for j in remaining if position(j)[0] == tier and position(j)[1] < place + max(1, window)]
        best = max(eligible, key=lambda j: seconds(j.task_id))  # max keeps the first of equals: fair order
        taken.append(best)
        remaining.remove(best)
    return taken
