"""Job states, defined once, and how they read to a client.

    queued -> compiling -> compiled -> running -> done
       ^          |            |          |
       +----------+------------+----------+   released (shutdown), lease expired (worker died),
                                              or system_error retried after a backoff
"""

from __future__ import annotations

import enum


class JobState(str, enum.Enum):
    QUEUED = "queued"
    """Waiting for a worker (or for `not_before` after a system_error)."""
    COMPILING = "compiling"
    """Claimed; sandbox.prepare (extract, static checks, build) is running in the compile pool."""
    COMPILED = "compiled"
    """Built; waiting for the worker's device."""
    RUNNING = "running"
    """sandbox.execute is running on a device."""
    DONE = "done"
    """A verdict is stored. Final."""


ACTIVE = (JobState.COMPILING, JobState.COMPILED, JobState.RUNNING)
"""States held by a worker under a lease."""


class PublicStatus(str, enum.Enum):
    """What GET /v1/submissions/{id} reports; `stage` gives the exact JobState."""

    QUEUED = "queued"
    COMPILING = "compiling"
    RUNNING = "running"
    DONE = "done"


PUBLIC = {
    JobState.QUEUED: PublicStatus.QUEUED,
    JobState.COMPILING: PublicStatus.COMPILING,
    JobState.COMPILED: PublicStatus.RUNNING,  # compiled and handed to a device executor
    JobState.RUNNING: PublicStatus.RUNNING,
    JobState.DONE: PublicStatus.DONE,
}
