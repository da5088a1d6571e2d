"""The worker judges on pre-started children (sandbox/execution/warm.py) and leaves no process behind when it stops.

Real parts: the worker loop in this process (and, for the signal path, the real `worker` command), the real
sandbox on the CPU, a real SQLite database.
"""

from __future__ import annotations

import os
import threading
from pathlib import Path

import pytest
from sqlalchemy import select

from sandbox import JudgeConfig, Status
from service import crud
from service.api.schemas import SubmissionCreate
from service.core.config import Settings
from service.db.models import VerdictRow
from service.db.session import Database
from service.worker.judging import SandboxJudge, make_judge
from service.worker.runner import Worker
from tests.service.conftest import CORRECT_KL_DIV, wait_for

JUDGE_S = 600  # two CPU judgements on the loaded 2-core machine (a cold build, baselines, two starts)
SPARE_S = 240  # one spare's start there (~13 s seen)


def _spares_under(root: int) -> dict[int, str]:
    """Live (not zombie) pre-started judge children that `root` itself started, and their processes: pid -> command
    line. Only those `root` started: a worker process another test keeps for the whole run (tests/integrations'
    session-scoped judge) has spares of its own below `root`, and they are not this worker's."""
    parents, states, cmdlines = {}, {}, {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as fh:
                fields = fh.read().rsplit(b")", 1)[1].split()
            with open(f"/proc/{entry}/cmdline", "rb") as fh:
                cmdline = fh.read().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        pid = int(entry)
        parents[pid], states[pid], cmdlines[pid] = int(fields[1]), fields[0], cmdline

    def spare(pid: int) -> bool:
        return "sandbox.child" in cmdlines[pid] and "--pre-started" in cmdlines[pid]

    started = {pid for pid in parents if parents[pid] == root and spare(pid)}
    found = {}
    for pid in parents:
        ancestor, depth = pid, 0
        while ancestor and ancestor not in started and depth < 64:
            ancestor, depth = parents.get(ancestor), depth + 1
        if ancestor in started and spare(pid) and states[pid] != b"Z":
            found[pid] = cmdlines[pid]
    return found


def _submit(db: Database, n: int) -> list[str]:
    with db.transaction() as session:
        key = crud.create_key(session, "alice")[0]
        return [crud.create_submission(session, key, SubmissionCreate(task="kl_div", source=CORRECT_KL_DIV.read_text(),
                                                                     model="m")).submission.id for _ in range(n)]


@pytest.mark.parametrize("db_url", ["sqlite"], indirect=True)
def test_the_worker_judges_on_spares_and_kills_them_when_it_stops(db_url: str, db: Database,
                                                                  judge_root: Path) -> None:
    subs = _submit(db, 2)
    settings = Settings(database_url=db_url, devices="cpu", compile_workers=1, lease_s=30, poll_s=0.05)
    config = JudgeConfig(build_root=judge_root / "builds", cache_root=judge_root / "cache", memory_limit_bytes=3 << 30,
                         call_timeout_s=20.0, timing_budget_ms=50.0, trials_per_distribution=1, min_reps=5,
                         max_reps=5, check_extra_shapes=False)
    judge = SandboxJudge(config, spares=1)
    worker = Worker(Database(db_url), settings, judge, ["cpu"])
    runner = threading.Thread(target=worker.run, kwargs={"max_jobs": 2}, daemon=True)
    runner.start()
    try:
        # A spare is started as the worker starts, before (and whether or not) a job arrives.
        wait_for(lambda: _spares_under(os.getpid()), SPARE_S, "a pre-started child under the worker")
        runner.join(JUDGE_S)
        assert not runner.is_alive(), "the worker did not finish its two jobs"
    finally:
        worker.stop()
        runner.join(60)

    with db.transaction(read_only=True) as session:
        rows = {r.submission_id: r for r in session.scalars(select(VerdictRow))}
    assert set(rows) == set(subs)
    for row in rows.values():
        assert row.status is Status.CORRECT, row.diagnosis
        pre = row.verdict["details"]["cost"]["pre_started"]
        assert pre is not None and pre["host_s"] > 0, "the candidate was not judged on a pre-started child"
        assert row.verdict["stages"]["start"] < 0.5
    assert judge.pool is None
    # SIGKILL reaches a spare's processes inside its namespace asynchronously (as in the SIGTERM test below): wait
    # for them to be gone, and fail if any outlives the deadline (a leak, not a slow exit)
    wait_for(lambda: _spares_under(os.getpid()) == {}, 30, "the stopped worker's pre-started children to be gone")


@pytest.mark.parametrize("db_url", ["sqlite"], indirect=True)
def test_a_worker_stopped_by_sigterm_leaves_no_spare_behind(db_url: str, spawn) -> None:  # noqa: ANN001
    worker = spawn("worker", JUDGE_WARM_SPARES="1")
    spares = wait_for(lambda: _spares_under(worker.pid), SPARE_S, "a pre-started child under the worker process")
    assert worker.terminate() == 0, worker.output()[-3000:]

    def gone(pid: int) -> bool:
        try:
            with open(f"/proc/{pid}/stat", "rb") as fh:
                return fh.read().rsplit(b")", 1)[1].split()[0] == b"Z"
        except OSError:
            return True

    wait_for(lambda: all(gone(pid) for pid in spares), 30, "the spares to be gone")


@pytest.mark.parametrize(("env", "spares", "standby"), [({}, None, None),
                                                         ({"JUDGE_WARM_SPARES": "3", "JUDGE_WARM_STANDBY": "5"}, 3, 5),
                                                         ({"JUDGE_WARM_STANDBY": "0"}, None, 0)])
def test_the_pool_sizes_reach_the_judge_from_the_environment(monkeypatch: pytest.MonkeyPatch, env: dict[str, str],
                                                             spares: int | None, standby: int | None) -> None:
    """JUDGE_WARM_SPARES / JUDGE_WARM_STANDBY as a deployment sets them (unset: GPU_SPARES and GPU_STANDBY per GPU,
    none for the CPU, decided when the judge opens its devices)."""
    for name in ("JUDGE_WARM_SPARES", "JUDGE_WARM_STANDBY"):
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    judge = make_judge(Settings())
    assert isinstance(judge, SandboxJudge)
    assert (judge.spares, judge.standby) == (spares, standby)
