"""Retention on SQLite and PostgreSQL: the build cache evicted by size, least recently used first, never a
build a job needs or one being built; old run directories and claim records pruned, verdicts kept."""

from __future__ import annotations

import datetime as dt
import os
import time
from pathlib import Path

from sqlalchemy import func, select, update

from sandbox.build.compiler import build_lock
from sandbox.verdict import Status, Verdict
from service import crud
from service.api.schemas import SubmissionCreate
from service.db.models import Job, JobAttempt, VerdictRow, utcnow
from service.db.session import Database
from service.maintenance import evict_builds, prune_artifacts
from service.queue import claims as q
from service.queue.states import JobState


def enqueue(db: Database, n: int) -> None:
    with db.transaction() as session:
        key = crud.create_key(session, "alice")[0]
        for i in range(n):
            crud.create_submission(session, key, SubmissionCreate(task="kl_div", source=f"# {i}\n"))


def make_build(root: Path, key: str, age_s: float, size: int = 100) -> Path:
    path = root / key
    (path / "sub").mkdir(parents=True)
    (path / "sub" / "module.so").write_bytes(b"x" * size)
    when = time.time() - age_s
    os.utime(path, (when, when))
    return path


def finished_with(db: Database, build_key: str, age: dt.timedelta | None = None) -> int:
    """Claim, compile (with `build_key`) and finish one job; optionally make it `age` old."""
    (claim,) = q.claim(db, "w", 1, 60)
    assert q.advance(db, claim.token, JobState.COMPILED, build_key=build_key)
    verdict = Verdict(status=Status.CORRECT, diagnosis="ok", task="kl_div", device="cpu", source_sha256="x")
    assert q.finish(db, claim.token, verdict, "w", q.RetryPolicy()) == "verdict"
    if age is not None:
        with db.transaction() as s:
            s.execute(update(Job).where(Job.id == claim.job_id).values(
                compiled_at=utcnow() - age, finished_at=utcnow() - age))
    return claim.job_id


def test_eviction_is_lru_and_spares_needed_and_locked_builds(db, tmp_path):
    root = tmp_path / "builds"
    a, b, c, d, e = (make_build(root, k, age) for k, age in
                     (("a" * 64, 1000), ("b" * 64, 900), ("c" * 64, 800), ("d" * 64, 700), ("e" * 64, 100)))
    enqueue(db, 2)
    finished_with(db, a.name)  # built long ago, reused just now: recently used
    (waiting,) = q.claim(db, "w", 1, 60)
    assert q.advance(db, waiting.token, JobState.COMPILED, build_key=b.name)  # compiled, waiting for a device
    with db.transaction() as s:  # compiled a while ago: b is not recently used, only needed
        s.execute(update(Job).where(Job.id == waiting.job_id).values(compiled_at=utcnow() - dt.timedelta(hours=1)))

    with build_lock(root, c.name):  # a builder holds c
        report = evict_builds(db, root, max_bytes=300)
    assert report.total_bytes == 500
    assert report.evicted == [d.name, e.name] and report.freed_bytes == 200
    assert report.kept_needed == [b.name] and report.kept_locked == [c.name]
    assert [p.exists() for p in (a, b, c, d, e)] == [True, True, True, False, False]
    assert evict_builds(db, root, max_bytes=300).evicted == []  # already within the limit


def test_dry_run_removes_nothing(db, tmp_path):
    root = tmp_path / "builds"
    old = make_build(root, "f" * 64, 1000)
    report = evict_builds(db, root, max_bytes=0, dry_run=True)
    assert report.evicted == [old.name] and old.exists()


def test_pruning_keeps_verdicts_and_live_run_dirs(db, tmp_path):
    runs = tmp_path / "runs"
    enqueue(db, 3)
    old_job = finished_with(db, "1" * 64, age=dt.timedelta(days=30))
    new_job = finished_with(db, "2" * 64)
    (live,) = q.claim(db, "w", 1, 60)
    assert q.advance(db, live.token, JobState.COMPILED, build_key="3" * 64)
    assert q.advance(db, live.token, JobState.RUNNING)
    month = time.time() - 30 * 86400
    for name, when in (("111111111111-abc", month), ("333333333333-def", month), ("222222222222-ghi", time.time())):
        (runs / name).mkdir(parents=True)
        os.utime(runs / name, (when, when))

    report = prune_artifacts(db, runs, older_than_days=14)
    assert report.run_dirs_removed == ["111111111111-abc"]
    assert report.run_dirs_kept_running == ["333333333333-def"]
    assert sorted(p.name for p in runs.iterdir()) == ["222222222222-ghi", "333333333333-def"]
    assert report.attempts_deleted == 1
    with db.transaction(read_only=True) as s:
        assert s.scalar(select(func.count()).select_from(VerdictRow)) == 2  # no verdict lost
        assert set(s.scalars(select(JobAttempt.job_id))) == {new_job, live.job_id}
        assert s.get(Job, old_job).state is JobState.DONE


def test_maintain_command_reports_and_dry_run_keeps_everything(db_url, tmp_path):
    """`kernel-judge maintain --dry-run` runs the same retention pass once and deletes nothing."""
    import json
    import subprocess
    import sys

    root = tmp_path / "builds"
    old = make_build(root, "f" * 64, 1000, size=5000)
    env = {**os.environ, "DATABASE_URL": db_url, "JUDGE_BUILD_ROOT": str(root), "JUDGE_CACHE_ROOT": str(tmp_path)}
    out = subprocess.run([sys.executable, "-m", "service.cli.main", "maintain", "--max-bytes", "10", "--dry-run"],
                         env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    report = json.loads(out.stdout)
    assert report["builds"]["max_bytes"] == 10
    assert report["builds"]["evicted"] == [old.name]
    assert old.exists(), "a dry run must not delete"
