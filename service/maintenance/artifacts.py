"""Pruning old artifacts without losing a verdict.

- Run directories (`<build root>/../runs/<key prefix>-*`): sandbox.execute removes its own when it ends;
  those left behind by a killed worker are removed once older than the retention, unless a job that is
  running now uses that build (its directory may be the live one).
- `job_attempts` rows of jobs that finished before the retention: an audit trail of claims; the job's
  counters (claims, crashes, system_errors) and its verdict stay.

Verdicts, submissions and jobs are never deleted here: they are the record.
"""

from __future__ import annotations

import datetime as dt
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path

from sqlalchemy import delete, select

from service.db.models import Job, JobAttempt, utcnow
from service.db.session import Database
from service.queue.states import JobState


@dataclass
class PruneReport:
    older_than_days: float
    run_dirs_removed: list[str] = field(default_factory=list)
    run_dirs_kept_running: list[str] = field(default_factory=list)
    attempts_deleted: int = 0


def prune_artifacts(db: Database, runs_root: Path, older_than_days: float, *, dry_run: bool = False) -> PruneReport:
    report = PruneReport(older_than_days=older_than_days)
    cutoff = utcnow() - dt.timedelta(days=older_than_days)
    with db.transaction(read_only=True) as session:
        running = {key[:12] for key in session.scalars(select(Job.build_key).where(
            Job.state == JobState.RUNNING, Job.build_key.is_not(None)))}
    if runs_root.is_dir():
        oldest = time.time() - older_than_days * 86400
        for path in runs_root.iterdir():
            if not path.is_dir() or path.stat().st_mtime > oldest:
                continue
            if path.name.split("-", 1)[0] in running:
                report.run_dirs_kept_running.append(path.name)
                continue
            if not dry_run:
                shutil.rmtree(path, ignore_errors=True)
            report.run_dirs_removed.append(path.name)
    finished = select(Job.id).where(Job.state == JobState.DONE, Job.finished_at < cutoff)
    with db.transaction() as session:
        if dry_run:
            report.attempts_deleted = len(session.scalars(
                select(JobAttempt.id).where(JobAttempt.job_id.in_(finished))).all())
        else:
            report.attempts_deleted = session.execute(
                delete(JobAttempt).where(JobAttempt.job_id.in_(finished))).rowcount or 0
    return report
