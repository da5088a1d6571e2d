"""The claim order on SQLite and PostgreSQL with real rows: longest expected device time first within a bounded
window of the fair order (service.queue.order), no starvation, the queue's two invariants under concurrent
claims, the expected seconds measured from recorded device holds (service.queue.lengths), and the worker's claim
call site using them."""

from __future__ import annotations

import datetime as dt
import threading

import pytest
from sqlalchemy import func, select, update

from sandbox.verdict import Environment, Status, Verdict
from service import crud
from service.api.schemas import SubmissionCreate
from service.batches.schemas import Sample
from service.batches.store import create_batch
from service.core.config import Settings
from service.db.models import Job, JobAttempt
from service.db.session import Database
from service.queue import claims as q
from service.queue import lengths
from service.queue.states import JobState
from service.worker.judging import CompileOnlyJudge, judge_config
from service.worker.runner import Worker

SECONDS = {"cross_entropy": 1.0, "kl_div": 2.0, "kl_div_train": 6.0, "cross_entropy_train": 5.0}


def seconds(task: str) -> float:
    return SECONDS[task]


def submit(db: Database, tasks: list[str]) -> list[str]:
    """Interactive submissions, one per task, in this order; their submission ids."""
    with db.transaction() as session:
        key = crud.create_key(session, "alice")[0]
        return [crud.create_submission(session, key, SubmissionCreate(task=t, source=f"# {i}\n")).submission.id
                for i, t in enumerate(tasks)]


def batch(db: Database, tasks: list[str]) -> list[str]:
    """One batch, one sample per task, in this order; the samples' submission ids."""
    with db.transaction() as session:
        key = crud.create_key(session, "bob")[0]
        samples = [(i + 1, Sample(task=t, source=f"# batch {i}\n")) for i, t in enumerate(tasks)]
        created = create_batch(session, key, samples, name=None, tags=[])
        return [s.submission_id for s in created.samples]


def claim_one_by_one(db: Database, window: int) -> list[str]:
    out = []
    while got := q.claim(db, "w", 1, 60, seconds=seconds, window=window):
        out.append(got[0].submission_id)
    return out


def test_longest_first_within_the_window(db):
    tasks = ["cross_entropy", "kl_div", "kl_div_train", "cross_entropy", "cross_entropy_train", "kl_div"]
    ids = submit(db, tasks)
    order = claim_one_by_one(db, window=8)
    assert [tasks[ids.index(s)] for s in order] == ["kl_div_train", "cross_entropy_train", "kl_div", "kl_div",
                                                     "cross_entropy", "cross_entropy"]
    assert order[2:4] == [ids[1], ids[5]] and order[4:] == [ids[0], ids[3]]  # equals keep their fair order


def test_a_claim_of_several_takes_the_longest_in_turn(db):
    ids = submit(db, ["cross_entropy", "kl_div", "kl_div_train", "cross_entropy"])
    got = q.claim(db, "w", 3, 60, seconds=seconds, window=8)
    assert [c.submission_id for c in got] == [ids[2], ids[1], ids[0]]
    assert len({c.token for c in got}) == 3


def test_window_one_and_no_figures_are_the_fair_order(db):
    ids = submit(db, ["cross_entropy", "kl_div_train", "kl_div"])
    assert [c.submission_id for c in q.claim(db, "w", 1, 60, seconds=seconds, window=1)] == [ids[0]]
    assert [c.submission_id for c in q.claim(db, "w", 5, 60)] == ids[1:]


def test_the_window_bounds_the_reordering(db):
    """Only jobs within `window` places of the head are eligible: the long job waits until the head is near."""
    tasks = ["cross_entropy"] * 4 + ["kl_div_train"]
    ids = submit(db, tasks)
    order = claim_one_by_one(db, window=3)
    # 4 places behind the first head: outside its window of 3; inside once the head is the third job, which it
    # then overtakes with the fourth (window - 1 jobs), never more.
    assert order == [ids[0], ids[1], ids[4], ids[2], ids[3]]


def test_a_short_job_is_not_starved_by_long_ones_that_keep_arriving(db):
    (short,) = submit(db, ["cross_entropy"])
    window, claimed = 4, []
    submit(db, ["kl_div_train"])
    for _ in range(20):
        (got,) = q.claim(db, "w", 1, 60, seconds=seconds, window=window)
        claimed.append(got.submission_id)
        if got.submission_id == short:
            break
        submit(db, ["kl_div_train"])  # a longer job arrives after every claim
    # Overtaken by exactly window - 1 later submissions, then claimed: never by the ones after those.
    assert claimed.index(short) == window - 1


def test_interactive_jobs_stay_ahead_of_batch_jobs(db):
    batch_ids = batch(db, ["kl_div_train", "kl_div_train"])
    (interactive,) = submit(db, ["cross_entropy"])
    got = [c.submission_id for c in q.claim(db, "w", 3, 60, seconds=seconds, window=32)]
    assert got == [interactive, *batch_ids]


def test_batch_jobs_are_reordered_by_fair_key_within_the_window(db):
    tasks = ["cross_entropy", "cross_entropy", "kl_div", "kl_div_train", "cross_entropy", "kl_div_train"]
    ids = batch(db, tasks)
    order = claim_one_by_one(db, window=4)
    # head fair_key 0, window [0, 4): the training job at 3 first, then kl_div at 2; the head's place stays 0
    # until it is taken, so the training job at 5 waits until fair_key 0 and 1 are claimed.
    assert order == [ids[3], ids[2], ids[0], ids[1], ids[5], ids[4]]


def test_concurrent_reordering_claims_keep_the_invariants(db):
    tasks = ["cross_entropy", "kl_div", "kl_div_train", "cross_entropy_train"] * 15
    submit(db, tasks[:30])
    batch(db, tasks[30:])
    got: dict[str, list[q.Claim]] = {}

    def run(name: str) -> None:
        mine = got.setdefault(name, [])
        while claimed := q.claim(db, name, 2, 60, seconds=seconds, window=8):
            mine.extend(claimed)

    threads = [threading.Thread(target=run, args=(f"w{i}",)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    everything = [c for claims in got.values() for c in claims]
    assert sorted(c.job_id for c in everything) == list(range(1, 61))  # none lost, none claimed twice
    assert len({c.token for c in everything}) == 60  # a fresh token per claim
    with db.transaction(read_only=True) as s:
        assert s.scalar(select(func.count()).select_from(JobAttempt)) == 60
    late = everything[0]
    assert q.finish(db, late.token, Verdict(status=Status.CORRECT, diagnosis="ok", task=late.task_id, device="cpu",
                                            source_sha256="x"), "w", q.RetryPolicy()) is q.Outcome.VERDICT


def judged(db: Database, task: str, held_s: float, model: str | None) -> None:
    """One job of `task` claimed, judged on `model` with a recorded device hold of `held_s`."""
    submit(db, [task])
    (c,) = q.claim(db, "w", 1, 60)
    assert q.advance(db, c.token, JobState.COMPILED) and q.advance(db, c.token, JobState.RUNNING)
    start = dt.datetime(2026, 1, 1)
    with db.transaction() as s:
        s.execute(update(JobAttempt).where(JobAttempt.claim_token == c.token).values(
            device="h/cuda:0", execute_started_at=start, execute_ended_at=start + dt.timedelta(seconds=held_s)))
    env = Environment(device="cuda:0", device_name=model, torch="2.13", python="3.12", isolation="bwrap")
    verdict = Verdict(status=Status.CORRECT, diagnosis="ok", task=task, device="cuda:0", source_sha256="x",
                      environment=env)
    assert q.finish(db, c.token, verdict, "w", q.RetryPolicy()) is q.Outcome.VERDICT


def test_expected_seconds_come_from_recorded_holds_per_task_and_gpu_model(db):
    for held in (1.0, 1.2, 1.4, 9.0, 1.1):  # the median shrugs off the one slow hold
        judged(db, "cross_entropy", held, "H100")
    for held in (3.0, 3.0, 3.0, 3.0, 3.0):
        judged(db, "kl_div", held, "H200")
    for held in (5.0, 5.0, 5.0, 5.0, 5.0):
        judged(db, "kl_div", held, "H100")
    for held in (40.0, 40.0):  # too few holds: the default stands
        judged(db, "kl_div_train", held, "H100")
    times = lengths.DeviceSeconds(["cuda:0"], model="H100")
    times.load(db)
    assert times.measured == {"cross_entropy": pytest.approx(1.2), "kl_div": pytest.approx(5.0)}
    other = lengths.DeviceSeconds(["cuda:0"], model="A100")  # no holds of its own: every model's median
    other.load(db)
    assert other.measured["kl_div"] == pytest.approx(4.0)
    first = lengths.FIRST_ON_CARD_S
    assert times.expected("kl_div_train") == pytest.approx(lengths.TRAINING_S + first)
    assert times.expected("cross_entropy") == pytest.approx(1.2 + first)
    times.executed("cuda:0", "cross_entropy", "H100")
    assert times.expected("cross_entropy") == pytest.approx(1.2)


def test_first_on_card_counts_for_the_share_of_devices_lacking_the_task():
    times = lengths.DeviceSeconds(["cuda:0", "cuda:1"])
    assert times.expected("kl_div") == pytest.approx(lengths.FORWARD_S + lengths.FIRST_ON_CARD_S)
    times.executed("cuda:1", "kl_div", "NVIDIA H100 80GB HBM3")
    assert times.expected("kl_div") == pytest.approx(lengths.FORWARD_S + lengths.FIRST_ON_CARD_S / 2)
    assert times.model == "NVIDIA H100 80GB HBM3"
    assert times.expected("some_future_task") == pytest.approx(lengths.FORWARD_S + lengths.FIRST_ON_CARD_S)


def test_refresh_rereads_only_after_its_interval(db):
    now = [0.0]
    times = lengths.DeviceSeconds(["cpu"], clock=lambda: now[0])
    times.maybe_refresh(db)
    assert times.measured == {}
    for held in (0.5,) * lengths.MIN_SAMPLES:
        judged(db, "kl_div", held, None)
    now[0] = lengths.REFRESH_S - 1
    times.maybe_refresh(db)
    assert times.measured == {}
    now[0] = lengths.REFRESH_S
    times.maybe_refresh(db)
    assert times.measured == {"kl_div": pytest.approx(0.5)}


def test_the_worker_claims_longest_first_and_learns_its_devices(settings, db):
    ids = submit(db, ["cross_entropy", "kl_div", "kl_div_train", "cross_entropy"])
    worker = Worker(db, settings, CompileOnlyJudge(judge_config(settings)), ["cpu:0", "cpu:1"])
    worker.lengths.executed("cpu:0", "cross_entropy", None)
    worker.lengths.executed("cpu:1", "cross_entropy", None)
    got = worker._claim(4)
    assert [c.submission_id for c in got] == [ids[2], ids[1], ids[0], ids[3]]


def test_a_zero_window_setting_keeps_the_fair_order(settings, db):
    ids = submit(db, ["cross_entropy", "kl_div_train"])
    fair = settings.model_copy(update={"claim_window": 0})
    worker = Worker(db, fair, CompileOnlyJudge(judge_config(fair)), ["cpu"])
    assert [c.submission_id for c in worker._claim(2)] == ids


def test_claim_window_is_read_from_the_environment_and_refuses_negatives(monkeypatch):
    monkeypatch.setenv("JUDGE_CLAIM_WINDOW", "64")
    assert Settings().claim_window == 64
    monkeypatch.setenv("JUDGE_CLAIM_WINDOW", "-1")
    with pytest.raises(ValueError, match="claim_window"):
        Settings()


def test_expired_interactive_and_batch_jobs_merge_in_fair_order(db):
    """The ready set is read as three parts (expired leases, queued interactive, queued batch): merged, they are
    claimed in the one fair order."""
    batch_ids = batch(db, ["kl_div", "kl_div", "kl_div"])
    (first,) = q.claim(db, "lost", 1, 60)  # fair_key 0, then its worker dies in compiling: its lease expires
    assert first.submission_id == batch_ids[0]
    with db.transaction() as s:
        s.execute(update(Job).where(Job.id == first.job_id).values(lease_expires_at=dt.datetime(2000, 1, 1)))
    (interactive,) = submit(db, ["kl_div"])
    got = [c.submission_id for c in q.claim(db, "w", 4, 60)]
    assert got == [interactive, batch_ids[0], batch_ids[1], batch_ids[2]]
