"""The worker's watchdog (issue 24): a worker stuck with claimed jobs is seen and its jobs are judged elsewhere.

Two stalls, each on SQLite and PostgreSQL: a worker stuck executing (a judge that blocks on an Event, in this
process, so the stall can also end), and `kernel-judge serve`'s own worker stuck compiling (the fault-injection
hook JUDGE_FAULT_PAUSE_AT, stuck for good). Small limits come from Settings (the judge's own timeouts and the
stall margin). Each asserts what an operator sees: the thread dump in the log, /readyz 503, the metrics, and that
the job is released, judged by a second worker to its normal verdict, with no crash blamed on the candidate.
"""

from __future__ import annotations

import os
import re
import sys
import threading
from dataclasses import replace
from pathlib import Path

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families
from sqlalchemy import select

from sandbox import JudgeConfig, PreparedCandidate, Verdict
from service import crud
from service.api.schemas import SubmissionCreate
from service.core.config import Settings
from service.db.models import Job, JobAttempt, VerdictRow
from service.db.session import Database
from service.queue.states import AttemptOutcome, HeldPhase, JobState
from service.worker.judging import SandboxJudge, judge_config
from service.worker.runner import FINISH_RETRIES_S, Worker
from service.worker.watchdog import StallLimits
from tests.sandbox.conftest import corpus_meta
from tests.service.conftest import ADMIN_KEY, CORPUS, Proc, free_port, wait_for

CANDIDATE = CORPUS / "cpu" / "kl_div_wrong_direction.py"
"""Its verdict (declared in the file) is decided by the correctness trials, before any timing, so a loaded machine
does not change it; and it needs no build."""
JUDGE_S = 300  # judging it on a loaded 2-core machine (a fresh baseline measurement included), with margin


def test_limits_follow_the_judges_own_time_limits():
    config = JudgeConfig(compile_timeout_s=300.0, run_timeout_s=200.0)
    limits = StallLimits.derive(config, margin_s=120.0, compile_slots=8, devices=1, record_retries_s=63.0)
    assert limits.limit(HeldPhase.COMPILING) == limits.limit(HeldPhase.CLAIMED) == 420.0
    assert limits.limit(HeldPhase.EXECUTING) == 320.0
    assert limits.limit(HeldPhase.COMPILED) == 8 * 320.0  # 8 compiled jobs can be queued ahead on one device
    assert limits.limit(HeldPhase.RECORDING) == 183.0
    two = StallLimits.derive(config, margin_s=120.0, compile_slots=8, devices=2, record_retries_s=63.0)
    assert two.compiled_s == 5 * 320.0
    assert limits.check_s() == 5.0 and StallLimits(1.0, 1.0, 1.0, 1.0).check_s() == 0.05

    settings = Settings(compile_timeout_s=2.0, run_timeout_s=3.0, stall_margin_s=0.5, devices="cpu")
    worker = Worker(Database("sqlite://"), settings, SandboxJudge(judge_config(settings)), ["cpu"])
    assert worker.watchdog.limits == StallLimits(compiling_s=2.5, compiled_s=3.5 * settings.compile_workers,
                                                 executing_s=3.5, recording_s=FINISH_RETRIES_S + 0.5)


# --- helpers ---------------------------------------------------------------------------------------------------

def _submit(db: Database) -> str:
    with db.transaction() as session:
        key = crud.create_key(session, "stall")[0]
        return crud.create_submission(session, key, SubmissionCreate(task=corpus_meta(CANDIDATE)["task"],
                                                                            source=CANDIDATE.read_text())
                                      ).submission.id


def _job(db: Database) -> Job:
    with db.transaction(read_only=True) as s:
        (job,) = s.scalars(select(Job)).all()
        return job


def _outcomes(db: Database) -> list[str | None]:
    with db.transaction(read_only=True) as s:
        return list(s.scalars(select(JobAttempt.outcome).order_by(JobAttempt.id)))


def _verdict(db: Database) -> VerdictRow | None:
    with db.transaction(read_only=True) as s:
        return s.scalars(select(VerdictRow)).first()


def _metric(text: str, name: str, **labels: str) -> float:
    return sum(s.value for family in text_string_to_metric_families(text) for s in family.samples
               if s.name == name and labels.items() <= s.labels.items())


def _assert_judged_without_blame(db: Database, sub: str) -> None:
    row = _verdict(db)
    assert row is not None and row.submission_id == sub
    assert re.fullmatch(corpus_meta(CANDIDATE)["expect"], row.status.value), row.diagnosis  # as declared
    job = _job(db)
    assert job.state is JobState.DONE and job.crashes == 0 and job.claims == 2
    assert _outcomes(db) == [AttemptOutcome.STALLED.value, AttemptOutcome.VERDICT.value]


# --- a worker stuck executing, in this process ------------------------------------------------------------------

class BlocksInExecute(SandboxJudge):
    """The real prepare; execute blocks until `unblock` is set (a stuck executor), then fails."""

    def __init__(self, config: JudgeConfig) -> None:
        super().__init__(config, spares=0)
        self.entered, self.unblock = threading.Event(), threading.Event()

    def execute(self, prepared: PreparedCandidate, device: str) -> Verdict:
        self.entered.set()
        self.unblock.wait()
        raise RuntimeError("the stuck executor came back")


@pytest.mark.timeout(600)
def test_a_worker_stuck_executing_is_seen_and_its_job_is_judged_elsewhere(db, db_url, client, judge_dirs, caplog):
    caplog.set_level("INFO")
    roots = {"build_root": Path(judge_dirs["JUDGE_BUILD_ROOT"]), "cache_root": Path(judge_dirs["JUDGE_CACHE_ROOT"])}
    sub = _submit(db)
    stuck_settings = Settings(database_url=db_url, devices="cpu", compile_workers=1, lease_s=30, poll_s=0.05,
                              run_timeout_s=1.0, stall_margin_s=0.5)
    stuck_judge = BlocksInExecute(replace(judge_config(stuck_settings), **roots))
    stuck = Worker(Database(db_url), stuck_settings, stuck_judge, ["cpu"], worker_id="stuck")
    second_settings = Settings(database_url=db_url, devices="cpu", compile_workers=1, lease_s=30, poll_s=0.05,
                               timing_budget_ms=100, trials_per_distribution=1, warm_spares=0)
    second = Worker(Database(db_url), second_settings,
                    SandboxJudge(replace(judge_config(second_settings), **roots), spares=0), ["cpu"],
                    worker_id="second")
    threads = [threading.Thread(target=w.run, daemon=True) for w in (stuck, second)]
    threads[0].start()
    try:
        wait_for(stuck_judge.entered.is_set, JUDGE_S, "the first worker to start executing")
        ready = wait_for(lambda: (r := client.get("/readyz")).status_code == 503 and r, 30, "/readyz to fail")
        assert ready.json()["status"] == "worker stalled"
        (stall,) = ready.json()["detail"]["stalled"]["stuck"]
        assert stall["phase"] == "executing" and stall["submission_id"] == sub and stall["limit_s"] == 1.5

        dumps = [r.getMessage() for r in caplog.records if r.name == "service.worker.watchdog"]
        assert any("most recent call first" in m and "in execute" in m and "test_watchdog.py" in m for m in dumps)
        metrics = client.get("/metrics").text
        assert _metric(metrics, "judge_worker_stalled_jobs", worker="stuck") == 1
        assert _metric(metrics, "judge_stalls_total", phase="executing") == 1
        assert _outcomes(db) == [AttemptOutcome.STALLED.value] and _job(db).state is JobState.QUEUED
        assert not stuck.held  # no longer heartbeaten

        threads[1].start()  # the stuck worker claims nothing more: its only executor is stuck
        wait_for(lambda: _verdict(db) is not None, JUDGE_S, "the second worker's verdict")
        _assert_judged_without_blame(db, sub)
        assert client.get("/readyz").status_code == 503  # the first worker's thread is still stuck

        stuck_judge.unblock.set()  # the stuck thread comes back: the stall is over, what it brings is discarded
        wait_for(lambda: client.get("/readyz").status_code == 200, 30, "/readyz to recover")
        metrics = client.get("/metrics").text
        assert _metric(metrics, "judge_worker_stalled_jobs", worker="stuck") == 0
        assert _metric(metrics, "judge_stalls_total", phase="executing") == 1
        assert stuck.stats.snapshot()["outcomes"] == {"lost": 1}
        _assert_judged_without_blame(db, sub)
    finally:
        stuck_judge.unblock.set()
        for w, t in zip((stuck, second), threads):
            w.stop()
            if t.is_alive():
                t.join(60)


class _WatchedLock:
    """A lock that says when someone had to wait for it."""

    def __init__(self) -> None:
        self.lock, self.contended = threading.Lock(), threading.Event()

    def __enter__(self) -> None:
        if not self.lock.acquire(blocking=False):
            self.contended.set()
            self.lock.acquire()

    def __exit__(self, *exc: object) -> None:
        self.lock.release()


@pytest.mark.timeout(600)
def test_a_stall_found_while_the_worker_claims_does_not_hand_it_back_its_own_job(db, db_url, judge_dirs):
    """The race CI once lost: the claim loop reads its capacity (one executor, busy but not yet stalled: room for
    one more job), the watchdog then finds the stall and releases the job, and the claim that follows takes that
    very job back onto the worker whose only executor is stuck. Forced here: the capacity, once read, is held
    back until the watchdog's release has either happened (the race lost) or is waiting for the claim to end, and the
    watchdog looks for the stall only once the claim loop has read its capacity with the job executing (on a loaded
    CI machine the loop once read none within the stall's 1.5 s, and the release came before any claim)."""
    roots = {"build_root": Path(judge_dirs["JUDGE_BUILD_ROOT"]), "cache_root": Path(judge_dirs["JUDGE_CACHE_ROOT"])}
    _submit(db)
    settings = Settings(database_url=db_url, devices="cpu", compile_workers=1, lease_s=30, poll_s=0.05,
                        run_timeout_s=1.0, stall_margin_s=0.5)
    judge = BlocksInExecute(replace(judge_config(settings), **roots))
    worker = Worker(Database(db_url), settings, judge, ["cpu"], worker_id="stuck")
    worker.claiming = watched = _WatchedLock()
    released = threading.Event()
    give_up, capacity = worker.give_up, worker._capacity

    def give_up_then_say_so(claim):  # noqa: ANN001, ANN202
        give_up(claim)
        released.set()

    held_back = threading.Event()

    def capacity_held_back() -> int:
        want = capacity()
        if judge.entered.is_set() and not held_back.is_set():
            held_back.set()
            wait_for(lambda: released.is_set() or watched.contended.is_set(), JUDGE_S,
                     "the watchdog to release the stalled job or to wait for the claim")
        return want

    check = worker.watchdog.check

    def check_once_the_capacity_is_held_back(holder):  # noqa: ANN001, ANN202
        if judge.entered.is_set():
            wait_for(held_back.is_set, JUDGE_S, "the claim loop to read its capacity while the job executes")
        return check(holder)

    worker.give_up, worker._capacity = give_up_then_say_so, capacity_held_back
    worker.watchdog.check = check_once_the_capacity_is_held_back
    thread = threading.Thread(target=worker.run, daemon=True)
    thread.start()
    try:
        wait_for(released.is_set, JUDGE_S, "the stalled job's release")
        assert held_back.is_set() and watched.contended.is_set(), "the release did not wait for the claim"
        wait_for(lambda: _job(db).state is JobState.QUEUED, 30, "the job back in the queue")
        assert _outcomes(db) == [AttemptOutcome.STALLED.value], "the stuck worker claimed its job back"
        assert worker._capacity() == 0  # its only executor is stuck: it claims nothing more
    finally:
        judge.unblock.set()
        worker.stop()
        thread.join(60)


# --- `kernel-judge serve`'s worker stuck compiling, for good -----------------------------------------------------

@pytest.mark.timeout(600)
def test_serves_worker_stuck_compiling_fails_readiness_and_its_job_is_judged_elsewhere(db, db_url, spawn,
                                                                                       judge_dirs, tmp_path):
    sub = _submit(db)
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    env = {**os.environ, **judge_dirs, "DATABASE_URL": db_url, "JUDGE_DEVICES": "cpu", "JUDGE_COMPILE_WORKERS": "1",
           "JUDGE_POLL_S": "0.05", "JUDGE_ADMIN_KEY": ADMIN_KEY, "JUDGE_LOG_LEVEL": "INFO",
           "JUDGE_FAULT_PAUSE_AT": "compiling", "JUDGE_COMPILE_TIMEOUT_S": "1", "JUDGE_STALL_MARGIN_S": "1"}
    serve = Proc([sys.executable, "-m", "service.cli.main", "serve", "--port", str(port)], env, tmp_path / "serve.log")
    try:
        def readiness() -> httpx.Response | None:
            assert serve.popen.poll() is None, serve.output()
            try:
                r = httpx.get(f"{base}/readyz", timeout=5)
            except httpx.TransportError:
                return None
            # Before its worker registers, serve answers 503 "worker starting" (what it can judge is not known yet).
            return r if r.status_code == 503 and r.json()["status"] == "worker stalled" else None

        ready = wait_for(readiness, 120, "serve's /readyz to report its stalled worker")
        assert ready.json()["status"] == "worker stalled", ready.text
        ((stalled_worker, stalls),) = ready.json()["detail"]["stalled"].items()
        assert [(s["phase"], s["submission_id"], s["limit_s"]) for s in stalls] == [("compiling", sub, 2.0)]
        log = serve.output()
        assert "FAULT INJECTION: paused at compiling" in log
        assert "most recent call first" in log and "in _fault_point" in log, log[-3000:]
        metrics = httpx.get(f"{base}/metrics", timeout=10).text
        assert _metric(metrics, "judge_worker_stalled_jobs") == 1
        assert _metric(metrics, "judge_stalls_total", phase="compiling") == 1
        wait_for(lambda: _job(db).state is JobState.QUEUED, 10, "the stalled job back in the queue")

        spawn("worker")  # another worker takes it; serve's worker claims nothing more (its compile slot is stuck)
        wait_for(lambda: _verdict(db) is not None, JUDGE_S, "the second worker's verdict")
        _assert_judged_without_blame(db, sub)
        assert httpx.get(f"{base}/readyz", timeout=5).status_code == 503  # stuck for good: restart it
        with db.transaction(read_only=True) as s:
            judged_by = s.scalars(select(VerdictRow.worker_id)).one()
        assert judged_by != stalled_worker
    finally:
        serve.close()
