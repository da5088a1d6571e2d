"""Build-cache eviction by size, least recently used first.

The cache (sandbox.build.compiler) is one directory per build key under the build root, with a `<key>.lock`
file beside it that a builder holds (flock) while it builds. Eviction never removes:

- a build whose lock is held: it is being built, or waited for, right now (we take the lock without
  blocking, and delete while holding it, so no builder can start on a half-deleted directory);
- a build that a job still needs: its key is on a job that is compiled or running (the executor copies
  it next), or queued after an earlier compile (released or retried: it will be reused).

"Last used" is the later of the directory's own times and the last job that compiled with that key
(from the database), so a build reused yesterday outlives one built once last month. A queued job whose
source was never compiled does not protect an identical old build: evicted, it is simply built again.
"""

from __future__ import annotations

import datetime as dt
import fcntl
import os
import shutil
from dataclasses import dataclass, field
from pathlib import Path

from sqlalchemy import func, select

from service.db.models import Job
from service.db.session import Database
from service.queue.states import JobState

NEEDED_STATES = (JobState.QUEUED, JobState.COMPILING, JobState.COMPILED, JobState.RUNNING)


@dataclass
class EvictionReport:
    max_bytes: int
    total_bytes: int = 0
    """Size of the cache before eviction."""
    freed_bytes: int = 0
    evicted: list[str] = field(default_factory=list)
    kept_needed: list[str] = field(default_factory=list)
    """Builds over the limit that were kept because a job needs them."""
    kept_locked: list[str] = field(default_factory=list)
    """Builds over the limit that were kept because a build holds their lock."""


def _size(path: Path) -> int:
    total = 0
    for root, _dirs, files in os.walk(path):
        for name in files:
            try:
                total += os.lstat(os.path.join(root, name)).st_size
            except OSError:
                pass  # removed meanwhile
    return total


def _last_used(path: Path, last_job: float | None) -> float:
    # mtime: when it was built (a cache hit writes nothing); the database knows every later reuse.
    return max(path.stat().st_mtime, last_job or 0.0)


def _job_usage(db: Database | None) -> tuple[set[str], dict[str, float]]:
    """Keys jobs still need, and the last time any job compiled with each key (unix seconds)."""
    if db is None:
        return set(), {}
    with db.transaction(read_only=True) as session:
        needed = set(session.scalars(select(Job.build_key).where(Job.state.in_(NEEDED_STATES),
                                                                 Job.build_key.is_not(None))))
        last = {key: when.replace(tzinfo=dt.timezone.utc).timestamp()  # stored as naive UTC
                for key, when in session.execute(select(Job.build_key, func.max(Job.compiled_at))
                                                 .where(Job.build_key.is_not(None)).group_by(Job.build_key))
                if when is not None}
    return needed, last


def evict_builds(db: Database | None, build_root: Path, max_bytes: int, *, dry_run: bool = False) -> EvictionReport:
    """Remove least recently used builds until the cache holds at most `max_bytes` (see the module doc)."""
    report = EvictionReport(max_bytes=max_bytes)
    if not build_root.is_dir():
        return report
    needed, last_job = _job_usage(db)
    builds = []
    for path in build_root.iterdir():
        if path.is_dir() and not path.is_symlink():
            size = _size(path)
            builds.append((_last_used(path, last_job.get(path.name)), path, size))
            report.total_bytes += size
    remaining = report.total_bytes
    for _when, path, size in sorted(builds, key=lambda b: b[0]):  # oldest use first
        if remaining <= max_bytes:
            break
        key = path.name
        if key in needed:
            report.kept_needed.append(key)
            continue
        with open(build_root / f"{key}.lock", "a") as lock:
            try:
                fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                report.kept_locked.append(key)
                continue
            try:
                if not dry_run:
                    shutil.rmtree(path, ignore_errors=True)
            finally:
                fcntl.flock(lock, fcntl.LOCK_UN)
        report.evicted.append(key)
        report.freed_bytes += size
        remaining -= size
    return report
