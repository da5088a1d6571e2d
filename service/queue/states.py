"""Job states, defined once, and how they read to a client.

    queued -> compiling -> compiled -> running -> done
       ^          |            |          |
       +----------+------------+----------+   released (shutdown, or stalled: its worker's watchdog gave it
                                              back), lease expired (worker died), or system_error retried
                                              after a backoff
    queued -> cancelled                       its batch was cancelled while it waited (final, never runs)

With builder workers (service/worker/roles.py), a builder takes a job from `queued` to `compiling`, publishes its
build (service/artifacts) and gives the job back to `queued` with `jobs.artifact_sha256` set: queued again, but in
the run stage (`Stage`), where a run worker claims it and goes on from the artifact.

A lease that expires in `running` counts a crash against the job (the candidate was the one executing
when its worker died); one that expires in `compiling` or `compiled` does not (the candidate's code was
not running: the worker died of something else).
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
    CANCELLED = "cancelled"
    """Its batch was cancelled while the job was still queued: never claimed, no verdict. Final.
    Only `queued` moves here (service.batches.store.cancel_batch); a claimed job runs to its verdict."""


ACTIVE = (JobState.COMPILING, JobState.COMPILED, JobState.RUNNING)
"""States held by a worker under a lease."""

FINAL = (JobState.DONE, JobState.CANCELLED)
"""States a job never leaves."""

BLAMED = JobState.RUNNING
"""The only state in which a worker's death counts as a crash of the job's candidate."""


class Stage(str, enum.Enum):
    """Which claims a job that waits (queued, or whose lease expired) is for; read from `jobs.artifact_sha256`.

    A job is in the build stage until a builder publishes its artifact, and in the run stage from then on: a
    builder's lease that expires (a builder lost mid-build) leaves the job in the build stage, since nothing was
    published; a run worker's release or retry leaves it in the run stage, the artifact still there."""

    BUILD = "build"
    """No artifact: claimed by builders, and by workers that build themselves (role all, or run with no builder)."""
    RUN = "run"
    """Its artifact is published: claimed by run workers (and workers of role all)."""


class Outcome(str, enum.Enum):
    """What `claims.finish` did with a result."""

    VERDICT = "verdict"
    """Stored as the job's final verdict; the job is done."""
    RETRY = "retry"
    """A system_error below the attempt limit: requeued with a backoff, nothing stored."""
    LOST = "lost"
    """The job is no longer this worker's (its lease expired and it was reclaimed): nothing written."""


class AttemptOutcome(str, enum.Enum):
    """How one claim of a job ended (`job_attempts.outcome`). Only `crashed` blames the candidate."""

    VERDICT = "verdict"
    """It recorded the job's verdict."""
    RETRY = "retry"
    """It recorded a system_error below the attempt limit: requeued with a backoff."""
    RELEASED = "released"
    """Its worker gave the job back unjudged (shutdown, or a failure of ours). No blame."""
    STALLED = "stalled"
    """Its worker's watchdog saw the job make no progress for far longer than its phase's limit allows and gave
    it back (service.worker.watchdog): the worker was stuck, not the candidate. No blame."""
    DISK_FULL = "disk_full"
    """It failed because the judge's disk was full: requeued to wait for space, apart from the system_errors
    (service.queue.requeue). No blame."""
    BUILT = "built"
    """Its builder published the build's artifact and gave the job back for a run worker (Stage.RUN). No blame."""
    CRASHED = "crashed"
    """Its lease expired while the candidate was running (BLAMED): counted in `jobs.crashes`."""
    EXPIRED = "expired"
    """Its lease expired before the candidate ran (the worker died or lost the database). No blame."""


class HeldPhase(str, enum.Enum):
    """Where a job is inside the worker that holds it (finer than JobState; reported in `workers`)."""

    CLAIMED = "claimed"
    """Claimed, waiting for a compile slot."""
    COMPILING = "compiling"
    """In sandbox.prepare (extract, static checks, build)."""
    COMPILED = "compiled"
    """Built, waiting for the device executor."""
    EXECUTING = "executing"
    """In sandbox.execute on a device: the candidate's code is running (JobState.RUNNING)."""
    RECORDING = "recording"
    """The verdict is being written (`finish`)."""


class PublicStatus(str, enum.Enum):
    """What GET /v1/submissions/{id} reports; `stage` gives the exact JobState."""

    QUEUED = "queued"
    COMPILING = "compiling"
    RUNNING = "running"
    DONE = "done"
    CANCELLED = "cancelled"


PUBLIC = {
    JobState.QUEUED: PublicStatus.QUEUED,
    JobState.COMPILING: PublicStatus.COMPILING,
    JobState.COMPILED: PublicStatus.RUNNING,  # compiled and handed to a device executor
    JobState.RUNNING: PublicStatus.RUNNING,
    JobState.DONE: PublicStatus.DONE,
    JobState.CANCELLED: PublicStatus.CANCELLED,
}
