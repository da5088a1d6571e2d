"""A full build disk is the host's failure, waited out and never the candidate's verdict (issue 40.3), on SQLite and
PostgreSQL.

The queue's rule (service/queue/requeue.py), with `finish` called as a worker calls it: a disk_full system_error
requeues the job with a growing, capped wait apart from its system_errors, counted in /metrics; after the last wait
it is a final system_error that says so. A build stall and the candidate's own verdicts are untouched.

Then the whole worker (real builds, real sandboxed children) on a build root that is a real small filesystem (a
tmpfs, tests/small_disk.py): full, the job waits (no verdict, nothing cached); freed, the job's verdict is the
candidate's own. A candidate that fills that disk itself while it runs gets its own verdict, once."""

from __future__ import annotations

import datetime as dt
import re
import threading
from dataclasses import replace
from pathlib import Path

import pytest
from sqlalchemy import select, update

from sandbox import Status, Verdict
from sandbox.build.compiler import DISK_FULL
from service import crud
from service.api.schemas import SubmissionCreate
from service.core.config import Settings
from service.db.models import Job, JobAttempt, VerdictRow, utcnow
from service.db.session import Database
from service.queue import claims
from service.queue.requeue import Waits
from service.queue.states import AttemptOutcome, JobState, Outcome
from service.worker.judging import SandboxJudge, judge_config
from service.worker.runner import Worker
from tests.sandbox.conftest import corpus_meta
from tests.service.conftest import CORPUS, wait_for
from tests.service.test_watchdog import _metric
from tests.small_disk import fill, free_bytes, small_disk

HONEST = CORPUS / "cpu" / "kl_div_cpp_correct.py"
FILLS_ITS_DISK = CORPUS / "hostile" / "cpu" / "c8_fill_disk.py"
BUILD_LIMIT_S = 1200.0


def _submit(db: Database, path: Path) -> str:
    with db.transaction() as session:
        key = crud.create_key(session, "disk")[0]
        return crud.create_submission(session, key, SubmissionCreate(task=corpus_meta(path)["task"],
                                                                     source=path.read_text())).submission.id


def _failed(status: Status, diagnosis: str, **details: object) -> Verdict:
    return Verdict(status=status, diagnosis=diagnosis, task="kl_div", device="cpu", judged_sha256="0" * 64,
                   details={"stage": "compile", **details})


DISK_FULL_ERROR = _failed(Status.SYSTEM_ERROR, "the build cache could not be written: [Errno 28] No space left on "
                          "device", infrastructure_kind=DISK_FULL)


def _job(db: Database) -> Job:
    with db.transaction(read_only=True) as session:
        return session.scalars(select(Job)).one()


def _outcomes(db: Database) -> list[str]:
    with db.transaction(read_only=True) as session:
        return list(session.scalars(select(JobAttempt.outcome).order_by(JobAttempt.id)))


def _claim_now(db: Database) -> claims.Claim:
    """Claim the one job, its wait cut short (the wait itself is checked on `not_before`)."""
    with db.transaction() as session:
        session.execute(update(Job).values(not_before=utcnow() - dt.timedelta(seconds=1)))
    return claims.claim(db, "w", 1, 30)[0]


def test_waits_grow_to_their_cap_and_end():
    waits = Waits(max_waits=10, cap_s=900.0)
    assert [waits.delay(n, 30.0) for n in range(1, 12)] == [30, 60, 120, 240, 480, 900, 900, 900, 900, 900, None]


def test_a_full_disk_waits_apart_from_the_retries_then_ends_as_a_final_system_error(db, client):
    _submit(db, HONEST)
    policy = claims.RetryPolicy(max_attempts=3, backoff_s=10.0, waits=Waits(max_waits=2, cap_s=15.0))
    for wait_s in (10.0, 15.0):  # the first wait is the backoff, the next twice that, capped
        before = utcnow()
        assert claims.finish(db, _claim_now(db).token, DISK_FULL_ERROR, "w", policy) is Outcome.RETRY
        job = _job(db)
        assert job.state is JobState.QUEUED and job.system_errors == 0
        assert abs((job.not_before - before).total_seconds() - wait_s) < 5
        assert _metric(client.get("/metrics").text, "judge_jobs_waiting", cause=DISK_FULL) == 1
    # A build stall of the host's is an ordinary retried system_error, counted in system_errors.
    stall = _failed(Status.SYSTEM_ERROR, "the build failed for reasons of the judge's: the host stalled the build",
                    infrastructure="the host stalled the build", stall={"stopped_s": 9.0})
    assert claims.finish(db, _claim_now(db).token, stall, "w", policy) is Outcome.RETRY
    assert _job(db).system_errors == 1
    assert _metric(client.get("/metrics").text, "judge_jobs_waiting", cause=DISK_FULL) == 0  # its last claim: a stall
    # The waits are spent: the next disk_full failure is stored as final, and says why.
    assert claims.finish(db, _claim_now(db).token, DISK_FULL_ERROR, "w", policy) is Outcome.VERDICT
    with db.transaction(read_only=True) as session:
        row = session.scalars(select(VerdictRow)).one()
    assert row.status is Status.SYSTEM_ERROR and row.verdict["details"]["final"] is True
    assert row.diagnosis.startswith("not judged: the judge's disk full lasted through 2 waits"), row.diagnosis
    assert "No space left on device" in row.diagnosis
    assert _job(db).system_errors == 2
    assert _outcomes(db) == ["disk_full", "disk_full", "retry", "verdict"]


def test_the_candidates_own_full_disk_is_its_verdict_at_once(db):
    _submit(db, HONEST)
    own = _failed(Status.RUNTIME_ERROR, "RuntimeError: contained: ['No space left on device']")
    assert claims.finish(db, _claim_now(db).token, own, "w", claims.RetryPolicy()) is Outcome.VERDICT
    assert _outcomes(db) == [AttemptOutcome.VERDICT.value]


def _worker(db_url: str, build_root: Path, cache_root: Path) -> tuple[Worker, threading.Thread]:
    # A compile limit (and so a watchdog limit) far past the build's: the first C++ build of a test run makes the
    # shared precompiled headers too, minutes of g++ on a loaded 2-core machine, which is no stall of the host's.
    settings = Settings(database_url=db_url, devices="cpu", compile_workers=1, lease_s=30, poll_s=0.05,
                        retry_backoff_s=0.5, timing_budget_ms=100, trials_per_distribution=1, warm_spares=0,
                        compile_timeout_s=BUILD_LIMIT_S)
    judge = SandboxJudge(replace(judge_config(settings), build_root=build_root, cache_root=cache_root), spares=0)
    worker = Worker(Database(db_url), settings, judge, ["cpu"], worker_id="small-disk")
    thread = threading.Thread(target=worker.run, daemon=True)
    thread.start()
    return worker, thread


def _verdict(db: Database) -> VerdictRow | None:
    with db.transaction(read_only=True) as session:
        return session.scalars(select(VerdictRow)).first()


@pytest.mark.timeout(1800)
def test_a_full_build_root_waits_and_once_freed_the_verdict_is_the_candidates(db, db_url, judge_dirs, caplog,
                                                                             tmp_path: Path):
    caplog.set_level("INFO")
    sub = _submit(db, HONEST)
    with small_disk(tmp_path / "disk", 16 << 20) as disk:
        build_root = disk / "builds"  # the runs' copies go beside it (build_root.parent / "runs"): the same disk
        filler = fill(disk)
        worker, thread = _worker(db_url, build_root, Path(judge_dirs["JUDGE_CACHE_ROOT"]))
        try:
            wait_for(lambda: AttemptOutcome.DISK_FULL.value in _outcomes(db), 300, "a claim that waited for space")
            assert _verdict(db) is None and _job(db).system_errors == 0  # not a verdict, not a retry spent
            assert not list(build_root.glob("*/result.json"))  # nothing cached
            filler.unlink()
            row = wait_for(lambda: _verdict(db), BUILD_LIMIT_S, "the verdict once space returned")
        finally:
            worker.stop()
            thread.join(60)
    assert row.submission_id == sub and row.status is Status.CORRECT, row.diagnosis  # as the corpus file declares
    outcomes = _outcomes(db)
    assert outcomes[-1] == "verdict" and set(outcomes[:-1]) == {"disk_full"}, outcomes
    assert _job(db).system_errors == 0
    assert any(r.name == "service.queue.requeue" and "disk_full (wait 1/" in r.getMessage() for r in caplog.records)


@pytest.mark.timeout(1800)
def test_a_candidate_that_fills_the_build_disk_itself_gets_its_own_verdict_once(db, db_url, judge_dirs,
                                                                              tmp_path: Path):
    sub = _submit(db, FILLS_ITS_DISK)
    meta = corpus_meta(FILLS_ITS_DISK)
    with small_disk(tmp_path / "disk", 16 << 20) as disk:
        free_before = free_bytes(disk)
        worker, thread = _worker(db_url, disk / "builds", Path(judge_dirs["JUDGE_CACHE_ROOT"]))
        try:
            row = wait_for(lambda: _verdict(db), BUILD_LIMIT_S, "the candidate's verdict")
        finally:
            worker.stop()
            thread.join(60)
        # Its run's copy of the build, where it wrote, is gone with the run: the judge's disk is as it was but
        # for the stored build.
        assert free_bytes(disk) > free_before - (4 << 20)
    assert row.submission_id == sub and re.fullmatch(meta["expect"], row.status.value), row.diagnosis
    assert re.search(meta["diagnosis"], row.diagnosis), row.diagnosis
    # It writes /tmp (its private tmpfs: stopped by the 2 GiB file limit or that tmpfs's end), then /build, its run's
    # copy of the build on the judge's small disk: 2 GiB per file would be allowed there, the full disk stopped it.
    assert re.search(r"contained: \['[^']+', 'No space left on device'\]", row.diagnosis), row.diagnosis
    assert _outcomes(db) == ["verdict"] and _job(db).system_errors == 0  # judged once, never requeued
