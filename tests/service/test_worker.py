"""Real worker processes (`python -m service.cli.main worker`) on SQLite and PostgreSQL.

Judging is real (the sandbox on the CPU at the tasks' CPU size) except in the 200-job race, which uses
the documented `compile-only` mode: the real sandbox.prepare (extraction, static checks, cached build),
no execution, so that 200 jobs take seconds rather than a quarter of an hour on two cores.
"""

from __future__ import annotations

import signal

import pytest
from sqlalchemy import func, select

from sandbox.verdict import Status
from service import crud
from service.api.schemas import SubmissionCreate
from service.db.models import Job, JobAttempt, VerdictRow
from service.db.session import Database
from service.queue.states import JobState
from tests.service.conftest import CORPUS, CORRECT_KL_DIV, wait_for

SOURCE = CORRECT_KL_DIV.read_text()
JUDGE_S = 300  # a cold CPU build (~30 s) plus baselines (~15 s) on a loaded 2-core machine, with margin


def submit(db: Database, source: str = SOURCE, task: str = "kl_div", n: int = 1) -> list[str]:
    with db.transaction() as session:
        key = crud.create_key(session, "alice")[0]
        return [crud.create_submission(session, key, SubmissionCreate(task=task, source=source, model="m")
                                       ).submission.id for _ in range(n)]


def jobs(db: Database) -> list[Job]:
    with db.transaction(read_only=True) as s:
        return list(s.scalars(select(Job).order_by(Job.id)))


def verdicts(db: Database) -> list[VerdictRow]:
    with db.transaction(read_only=True) as s:
        return list(s.scalars(select(VerdictRow).order_by(VerdictRow.id)))


def all_done(db: Database) -> bool:
    return all(j.state is JobState.DONE for j in jobs(db))


def state_of(db: Database, sub_id: str) -> JobState:
    return next(j.state for j in jobs(db) if j.submission_id == sub_id)


def running_after(db: Database, crashes: int) -> bool:
    """The only job is executing under a worker that claimed it after `crashes` crashes."""
    (job,) = jobs(db)
    return job.state is JobState.RUNNING and job.crashes == crashes


def test_worker_judges_real_candidates_and_reuses_the_build(db, spawn, client):
    correct_a, correct_b = submit(db, n=2)
    (rejected,) = submit(db, (CORPUS / "cpu" / "no_candidate.md").read_text(), task="cross_entropy")
    worker = spawn("worker")
    wait_for(lambda: all_done(db), JUDGE_S, "three verdicts")

    by_sub = {v.submission_id: v for v in verdicts(db)}
    assert len(by_sub) == 3
    assert by_sub[correct_a].status is Status.CORRECT, by_sub[correct_a].diagnosis
    assert by_sub[correct_b].status is Status.CORRECT, by_sub[correct_b].diagnosis
    assert by_sub[rejected].status is Status.COMPILE_ERROR and "ModelNew" in by_sub[rejected].diagnosis
    assert by_sub[correct_a].median_ms > 0 and by_sub[correct_a].speedup_eager > 0
    assert by_sub[correct_a].device == "cpu" and by_sub[correct_a].device_name.startswith("cpu")
    # Identical source for the same task and toolchain is built once: the second job reuses the build.
    job_a, job_b = (j for j in jobs(db) if j.submission_id in (correct_a, correct_b))
    assert job_a.build_key == job_b.build_key and job_b.compile_cached is True

    view = client.get(f"/v1/submissions/{correct_a}").json()
    assert view["status"] == "done" and view["verdict"]["status"] == "correct"
    assert view["verdict"]["performance"]["speedups"]["eager"] > 0
    board = client.get("/v1/leaderboard/kl_div").json()
    (device,) = board["devices"]
    assert [e["name"] for e in device["entries"]] == ["alice"]
    assert device["entries"][0]["submission_id"] in (correct_a, correct_b)
    task = client.get("/v1/tasks/kl_div").json()
    assert task["baselines"][0]["device_name"] == device["device_name"]
    assert task["baselines"][0]["baselines_ms"]["eager"] > 0
    assert worker.terminate() == 0


def test_kill9_mid_job_is_reclaimed_with_exactly_one_verdict(db, spawn):
    (sub,) = submit(db)
    first = spawn("worker")
    wait_for(lambda: state_of(db, sub) is JobState.RUNNING, JUDGE_S, "the first worker to be running the job")
    first.kill9()
    assert state_of(db, sub) is JobState.RUNNING  # nothing was recorded by the dead worker
    second = spawn("worker")
    wait_for(lambda: state_of(db, sub) is JobState.DONE, JUDGE_S, "the second worker to finish the job")

    (row,) = verdicts(db)
    assert row.submission_id == sub and row.status is Status.CORRECT, row.diagnosis
    (job,) = jobs(db)
    assert job.crashes == 1 and job.claims == 2
    with db.transaction(read_only=True) as s:
        attempts = s.execute(select(JobAttempt.worker_id, JobAttempt.outcome).order_by(JobAttempt.id)).all()
    assert [a.outcome for a in attempts] == ["crashed", "verdict"]
    assert attempts[0].worker_id.endswith(f":{first.pid}") and attempts[1].worker_id.endswith(f":{second.pid}")
    assert row.worker_id == attempts[1].worker_id
    assert second.terminate() == 0


def test_a_job_that_kills_two_workers_gets_a_final_verdict(db, spawn):
    (sub,) = submit(db)
    for crash in (1, 2):
        # Held at the start of execution (the drills' fault hook), so the kill lands while the candidate is the
        # one running, never in the few milliseconds while a fast, cached judging records its verdict.
        worker = spawn("worker", JUDGE_FAULT_PAUSE_AT="executing")
        # State and crash count from one read: two reads could pair the dead worker's RUNNING with the new
        # worker's crash count and kill it while it is still compiling, which is (rightly) not blamed.
        wait_for(lambda c=crash: running_after(db, c - 1), JUDGE_S, f"worker {crash} to be running the job")
        worker.kill9()
    last = spawn("worker")
    wait_for(lambda: state_of(db, sub) is JobState.DONE, 60, "the final verdict")
    (row,) = verdicts(db)
    # Two lost workers end the retries, but the cause is unknown: a system_error that says so, not a runtime_error.
    assert row.status is Status.SYSTEM_ERROR
    assert "was lost 2 times while the candidate executed" in row.diagnosis
    assert "crashed the judging worker" not in row.diagnosis
    (job,) = jobs(db)
    assert job.crashes == 2 and job.claims == 3
    assert last.terminate() == 0


@pytest.mark.both_databases  # the race for claims is the back ends' locking, under real processes
def test_two_workers_race_for_200_jobs_none_lost_or_doubled(db, spawn):
    env = {"JUDGE_MODE": "compile-only", "JUDGE_COMPILE_WORKERS": "2"}
    workers = [spawn("worker", **env) for _ in range(2)]
    for w in workers:  # both claim loops are running before the jobs appear
        wait_for(lambda w=w: "judge=compile-only" in w.output(), 120, "a worker to start")
    ids = submit(db, n=200)
    wait_for(lambda: all_done(db), 240, "200 verdicts")

    rows = verdicts(db)
    assert len(rows) == 200 and {r.submission_id for r in rows} == set(ids)
    assert all(r.status is Status.CORRECT for r in rows)
    assert all(j.claims == 1 and j.crashes == 0 for j in jobs(db))  # no job was claimed twice
    with db.transaction(read_only=True) as s:
        outcomes = s.execute(select(JobAttempt.outcome, func.count()).group_by(JobAttempt.outcome)).all()
        per_worker = dict(s.execute(select(VerdictRow.worker_id, func.count()).group_by(VerdictRow.worker_id)).all())
    assert dict(outcomes) == {"verdict": 200}
    assert len(per_worker) == 2 and sum(per_worker.values()) == 200, per_worker  # both took part
    for w in workers:
        assert w.terminate() == 0


def test_sigterm_finishes_the_running_job_and_releases_the_rest(db, spawn):
    ids = submit(db, n=3)
    worker = spawn("worker", JUDGE_SHUTDOWN_GRACE_S=str(JUDGE_S))
    # One job on the (CPU) device, one compiled and waiting for it: the worker holds two.
    wait_for(lambda: [j.state for j in jobs(db)][:2] == [JobState.RUNNING, JobState.COMPILED], JUDGE_S,
             "one job running and one compiled")
    worker.popen.send_signal(signal.SIGTERM)
    assert worker.popen.wait(120) == 0, worker.output()

    states = {j.submission_id: j for j in jobs(db)}
    assert states[ids[0]].state is JobState.DONE
    assert [states[i].state for i in ids[1:]] == [JobState.QUEUED, JobState.QUEUED]
    assert all(states[i].worker_id is None and states[i].crashes == 0 for i in ids[1:])
    (row,) = verdicts(db)
    assert row.submission_id == ids[0] and row.status is Status.CORRECT
    with db.transaction(read_only=True) as s:
        outcomes = sorted(s.scalars(select(JobAttempt.outcome)))
    assert outcomes.count("verdict") == 1 and set(outcomes) == {"released", "verdict"}
