"""The artifact store: builds published by builders, read by run workers, in the `artifacts` table.

Why the database: both roles reach it already (nothing new to deploy, secure or back up), an artifact is a few MB
(a CUDA extension's .so and objects, compressed; the CPU corpus's well under 1 MB), and a row is written once and
read once or twice per job. Past tens of MB per artifact, or thousands of artifacts a minute, an object store (S3,
GCS, MinIO) is the path: the row would keep the key and digest and point at the object; nothing else changes,
since the run worker checks the bytes against the job's digest wherever they come from.

Content-addressed by the build key: equal candidates built by the same toolchain share one row. A builder that
finds an intact row for its key (its bytes match its digest) reuses it; a row whose bytes no longer match is
replaced. `kernel-judge maintain` (and a worker's maintenance thread) removes those no waiting job needs (`prune`).
"""

from __future__ import annotations

import datetime as dt
import hashlib
from dataclasses import dataclass

from sqlalchemy import delete, func, select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from service.db.models import ArtifactRow, Job, utcnow
from service.db.session import Database
from service.queue.states import FINAL


@dataclass(frozen=True)
class Stored:
    sha256: str
    data: bytes


def digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def put(db: Database, build_key: str, data: bytes, builder: str) -> str:
    """Store `data` as the artifact of `build_key` unless an intact one is there; returns the digest the job must
    record (the stored row's). Two builders publishing one key at once: the second's insert fails on the key and
    it takes the first's row."""
    try:
        return _put(db, build_key, data, builder)
    except IntegrityError:
        return _put(db, build_key, data, builder)


def _put(db: Database, build_key: str, data: bytes, builder: str) -> str:
    sha = digest(data)
    with db.transaction() as session:
        row = session.get(ArtifactRow, build_key)
        if row is not None and digest(row.data) == row.sha256:
            return row.sha256
        if row is None:
            session.add(ArtifactRow(build_key=build_key, sha256=sha, size=len(data), data=data, builder=builder,
                                    created_at=utcnow()))
        else:  # torn or altered: ours replaces it
            row.sha256, row.size, row.data, row.builder, row.created_at = sha, len(data), data, builder, utcnow()
    return sha


def get(db: Database, build_key: str) -> Stored | None:
    with db.transaction(read_only=True) as session:
        row = session.get(ArtifactRow, build_key)
        return None if row is None else Stored(row.sha256, bytes(row.data))


PRUNE_AFTER = dt.timedelta(minutes=10)
"""An artifact is kept at least this long: a builder stores it a moment before its job names it (`publish`)."""


def prune(session: Session, *, dry_run: bool = False) -> int:
    """Remove the artifacts older than PRUNE_AFTER that no unfinished job names; returns how many (would) go. A run
    worker that finds one gone builds the candidate itself."""
    needed = select(Job.build_key).where(Job.state.not_in(FINAL), Job.build_key.is_not(None))
    gone = (ArtifactRow.build_key.not_in(needed)) & (ArtifactRow.created_at < utcnow() - PRUNE_AFTER)
    if dry_run:
        return session.scalar(select(func.count()).select_from(ArtifactRow).where(gone)) or 0
    return session.execute(delete(ArtifactRow).where(gone)).rowcount or 0
