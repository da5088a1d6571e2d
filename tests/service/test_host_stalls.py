"""A job whose build the host stopped is judged again to the candidate's own verdict (issue 40.2), on SQLite and
PostgreSQL: the worker's first prepare runs under a short compile limit while every process of its build child is
stopped with SIGSTOP (a real child, a real signal); the stall is a retried system_error, counted with the
compiling phase's stalls in /metrics and logged by the watchdog, and the retry gives the verdict the corpus file
declares, never a `timeout`."""

from __future__ import annotations

import re
import threading
from dataclasses import replace
from pathlib import Path

import pytest
from sqlalchemy import select

from sandbox import PreparedCandidate, Verdict
from service import crud
from service.api.schemas import SubmissionCreate
from service.core.config import Settings
from service.db.models import Job, JobAttempt, VerdictRow
from service.db.session import Database
from service.queue.states import AttemptOutcome, JobState
from service.worker.judging import SandboxJudge, judge_config
from service.worker.runner import Worker
from tests.sandbox.conftest import corpus_meta
from tests.sandbox.test_build_stalls import SHORT_LIMIT_S, _stop_build_children
from tests.service.conftest import CORPUS, wait_for
from tests.service.test_watchdog import _metric

CANDIDATE = CORPUS / "cpu" / "kl_div_wrong_direction.py"
"""Decided by the correctness trials, and built by importing it alone: a quick build child to stop."""


class StoppedOnce(SandboxJudge):
    """The real judge; its first prepare under a short compile limit while a frozen host stops its build child."""

    def __init__(self, config) -> None:  # noqa: ANN001
        super().__init__(config, spares=0)
        self.stalled: Verdict | PreparedCandidate | None = None

    def prepare(self, task_id: str, source: str, *, target: str) -> PreparedCandidate | Verdict:
        if self.stalled is not None:
            return super().prepare(task_id, source, target=target)
        done, stopped = threading.Event(), []
        stopper = threading.Thread(target=_stop_build_children, args=(done, stopped))
        stopper.start()
        full, self.config = self.config, replace(self.config, compile_timeout_s=SHORT_LIMIT_S)
        try:
            self.stalled = super().prepare(task_id, source, target=target)
        finally:
            self.config = full
            done.set()
            stopper.join()
        return self.stalled


@pytest.mark.timeout(600)
def test_a_stopped_build_is_judged_again_to_the_candidates_verdict(db, db_url, client, judge_dirs, caplog,
                                                                   tmp_path: Path):
    caplog.set_level("INFO")
    # A build root of its own: a stored build of the same source (the other database's run) would need no child.
    roots = {"build_root": tmp_path / "builds", "cache_root": Path(judge_dirs["JUDGE_CACHE_ROOT"])}
    with db.transaction() as session:
        key = crud.create_key(session, "stalls")[0]
        sub = crud.create_submission(session, key, SubmissionCreate(task=corpus_meta(CANDIDATE)["task"],
                                                                    source=CANDIDATE.read_text())).submission.id
    settings = Settings(database_url=db_url, devices="cpu", compile_workers=1, lease_s=30, poll_s=0.05,
                        retry_backoff_s=0.1, timing_budget_ms=100, trials_per_distribution=1, warm_spares=0)
    judge = StoppedOnce(replace(judge_config(settings), **roots))
    worker = Worker(Database(db_url), settings, judge, ["cpu"], worker_id="frozen-host")
    thread = threading.Thread(target=worker.run, daemon=True)
    thread.start()
    try:
        def verdict() -> VerdictRow | None:
            with db.transaction(read_only=True) as s:
                return s.scalars(select(VerdictRow)).first()

        row = wait_for(verdict, 500, "the verdict after the stall")
    finally:
        worker.stop()
        thread.join(60)
    first = judge.stalled
    assert isinstance(first, Verdict) and first.details["stall"]["stopped_s"] > 0, first
    assert row.submission_id == sub and row.status.value != "timeout"
    assert re.fullmatch(corpus_meta(CANDIDATE)["expect"], row.status.value), row.diagnosis  # as declared
    with db.transaction(read_only=True) as s:
        job = s.scalars(select(Job)).one()
        outcomes = list(s.scalars(select(JobAttempt.outcome).order_by(JobAttempt.id)))
    assert job.state is JobState.DONE and job.crashes == 0 and job.system_errors == 1
    assert outcomes == [AttemptOutcome.RETRY.value, AttemptOutcome.VERDICT.value]
    assert _metric(client.get("/metrics").text, "judge_stalls_total", phase="compiling") == 1
    assert any("while the host stopped or starved it" in r.getMessage() for r in caplog.records
               if r.name == "service.worker.watchdog")
