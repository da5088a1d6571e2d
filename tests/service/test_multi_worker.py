"""Several devices, several workers: every job claimed once, no device running two jobs at once, and the
device-busy timeline that shows it (service.observability.timeline, service.worker.holds).

The timeline's arithmetic is checked on hand-made holds (overlaps, busy union, fractions, the SVG); its reading
on rows written by the real queue and hold stamps; and the whole on two real worker processes, one CPU device
each (`cpu:0`, `cpu:1`), against one PostgreSQL, judging real candidates with the real sandbox.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import socket

import pytest
from sqlalchemy import func, insert, select

from sandbox import Status, Verdict
from service.db.models import ApiKey, Batch, Job, JobAttempt, Submission, VerdictRow, WorkerRow, new_id, utcnow
from service.db.session import Database
from service.observability import timeline
from service.observability.timeline import Hold
from service.queue import claims as q
from service.queue.states import JobState
from service.worker import holds
from tests.service.conftest import CORPUS, wait_for

T0 = dt.datetime(2026, 11, 23, 12, 0, 0)


def hold(lane: str, start_s: float, end_s: float, job: int, *, closed: bool = True, result: str = "correct") -> Hold:
    return Hold(lane=lane, job_id=job, submission_id=f"s{job}", worker_id="w", start=T0 + dt.timedelta(seconds=start_s),
                end=T0 + dt.timedelta(seconds=end_s), closed=closed, result=result)


# --- the timeline's arithmetic --------------------------------------------------------------------------


def test_overlaps_are_pairs_sharing_an_instant_on_one_lane():
    holds_ = [hold("h/cuda:0", 0, 10, 1), hold("h/cuda:0", 10, 20, 2),  # touching: not an overlap
              hold("h/cuda:1", 5, 15, 3),                                # another lane: not an overlap
              hold("h/cuda:0", 18, 25, 4), hold("h/cuda:0", 19, 21, 5)]  # 4 overlaps 2; 5 overlaps 2 and 4
    found = {(o.first.job_id, o.second.job_id): o.seconds for o in timeline.overlaps(holds_)}
    assert found == {(2, 4): 2.0, (2, 5): 1.0, (4, 5): 2.0}
    assert {o.lane for o in timeline.overlaps(holds_)} == {"h/cuda:0"}
    assert timeline.overlaps([h for h in holds_ if h.job_id in (1, 2, 3)]) == []


def test_busy_time_is_the_union_of_holds_clipped_to_the_window():
    holds_ = [hold("a", 0, 10, 1), hold("a", 5, 12, 2), hold("a", 20, 30, 3), hold("b", 0, 40, 4)]
    start, end = T0, T0 + dt.timedelta(seconds=40)
    assert timeline.busy_seconds(holds_, start, end) == {"a": 22.0, "b": 40.0}  # 0-12 and 20-30, not 10+7+10
    assert timeline.busy_fraction(holds_, start, end) == {"a": 0.55, "b": 1.0}
    later = T0 + dt.timedelta(seconds=8)
    assert timeline.busy_seconds(holds_, later, T0 + dt.timedelta(seconds=25)) == {"a": 9.0, "b": 17.0}
    assert timeline.span(holds_) == (T0, T0 + dt.timedelta(seconds=40))
    assert timeline.span([]) is None
    assert timeline.busy_fraction(holds_, start, start) == {"a": 0.0, "b": 0.0}


def test_utilization_samples_become_busy_spans_per_gpu():
    """nvidia-smi samples (200 ms apart) -> spans: a run above zero starts at the sample before it and ends at the
    next zero; a run still busy at the end ends at the last sample; each GPU gets its own lane."""
    t = T0.replace(tzinfo=dt.timezone.utc).timestamp()  # T0 is naive UTC, as the stamps are
    samples = [(t + 0.0, 0, 0.0), (t + 0.2, 0, 35.0), (t + 0.4, 0, 80.0), (t + 0.6, 0, 0.0), (t + 0.8, 0, 0.0),
               (t + 1.0, 0, 12.0), (t + 0.0, 1, 50.0), (t + 0.2, 1, 50.0)]
    spans = timeline.utilization_spans(reversed(samples))  # order of the samples does not matter
    got = sorted((s.lane, round((s.start - T0).total_seconds(), 3), round((s.end - T0).total_seconds(), 3))
                 for s in spans)
    assert got == [("GPU 0", 0.0, 0.6), ("GPU 0", 0.8, 1.0), ("GPU 1", 0.0, 0.2)]
    assert timeline.busy_fraction(spans, T0, T0 + dt.timedelta(seconds=1)) == pytest.approx({"GPU 0": 0.8,
                                                                                              "GPU 1": 0.2})
    assert timeline.utilization_spans([]) == []


def test_svg_has_a_lane_per_device_marks_overlaps_and_escapes_names():
    clean = timeline.render_svg([hold("h/cpu:0", 0, 5, 1), hold("h/cpu:1", 1, 4, 2, result="incorrect")])
    assert clean.startswith("<svg") and clean.count("% busy)") == 2 and "OVERLAP" not in clean
    assert "#2f7d32" in clean and "#c77700" in clean  # correct green, incorrect amber
    bad = timeline.render_svg([hold("<b>&/cuda:0", 0, 5, 1), hold("<b>&/cuda:0", 2, 6, 2, closed=False)])
    assert "OVERLAP: jobs 1 and 2 at once, 3.00 s" in bad and "<b>&" not in bad and "&lt;b&gt;&amp;" in bad
    assert 'stroke-dasharray="3 2"' in bad  # the hold whose end was not stamped is drawn as open
    text = timeline.summary([hold("x/cuda:0", 0, 5, 1), hold("x/cuda:0", 2, 6, 2, closed=False)])
    assert "overlaps (a device running two jobs at once): 1" in text and "jobs 1 and 2, 3.000 s" in text
    assert "1 without a stamped end" in text


def test_a_lane_names_the_physical_gpu():
    assert holds.lane("cuda:1", host="h", visible="") == "h/cuda:1"
    assert holds.lane("cuda:1", host="h", visible="2,3") == "h/cuda:3"
    assert holds.lane("cuda:0", host="h", visible="GPU-abc, GPU-def") == "h/cuda:GPU-abc"
    assert holds.lane("cuda", host="h", visible="5") == "h/cuda:5"
    assert holds.lane("cpu:1", host="h", visible="0") == "h/cpu:1"
    # A virtual CPU device is its own lane, but the sandbox judges on the CPU.
    assert [holds.sandbox_device(d) for d in ("cpu:1", "cpu", "cuda:1")] == ["cpu", "cpu", "cuda:1"]


# --- holds written by the queue and the stamps, read back -----------------------------------------------

SOURCE = (CORPUS / "cpu" / "kl_div_wrong_direction.py").read_text()
SHA = hashlib.sha256(SOURCE.encode()).hexdigest()


def insert_jobs(db: Database, n: int) -> str:
    """n queued jobs of one python-only candidate (no build: the jobs cost what executing costs), as one batch
    inserted straight in the tables, so identical samples are not folded into one as an upload would."""
    now = utcnow()
    with db.transaction() as s:
        key = ApiKey(id=new_id(), submitter="multi", prefix="kj_x", key_hash=new_id() + new_id())
        s.add(key)
        s.flush()
        batch = new_id()
        s.add(Batch(id=batch, kind="batch", api_key_id=key.id, submitter="multi", total=n, duplicates=0,
                    rejected=[], tags=[], created_at=now))
        s.flush()
        ids = [new_id() for _ in range(n)]
        s.execute(insert(Submission), [
            {"id": i, "task_id": "kl_div", "source": SOURCE, "text_sha256": SHA, "api_key_id": key.id,
             "submitter": "multi", "sampling": {}, "tags": [], "created_at": now, "batch_id": batch, "line": k + 1}
            for k, i in enumerate(ids)])
        s.execute(insert(Job), [{"submission_id": i, "task_id": "kl_div", "state": JobState.QUEUED,
                                 "not_before": now, "queued_at": now, "fair_key": k} for k, i in enumerate(ids)])
    return batch


def verdict(status: Status = Status.INCORRECT) -> Verdict:
    return Verdict(status=status, task="kl_div", device="cpu:0", source_sha256=SHA, diagnosis="test")


def test_holds_are_read_back_per_claim_with_open_ones_bounded(db):
    batch = insert_jobs(db, 3)
    policy = q.RetryPolicy(max_attempts=3, backoff_s=0.0, max_worker_crashes=2)
    first, second, third = q.claim(db, "w1", 3, lease_s=60)
    for c in (first, second, third):
        assert q.advance(db, c.token, JobState.RUNNING)
    holds.started(db, first.token, "h/cpu:0")
    holds.started(db, second.token, "h/cpu:0")  # the same device before the first ended; never ends: open
    holds.ended(db, first.token)
    assert q.finish(db, first.token, verdict(), "w1", policy).value == "verdict"
    holds.started(db, third.token, "h/cpu:1")
    holds.ended(db, third.token)
    assert q.finish(db, third.token, verdict(Status.SYSTEM_ERROR), "w1", policy).value == "retry"

    with db.transaction(read_only=True) as s:
        got = timeline.load_holds(s, batch_id=batch, now=utcnow() + dt.timedelta(seconds=5))
        assert timeline.executed_without_hold(s, batch_id=batch) == 0
        assert timeline.load_holds(s, batch_id="no-such-batch") == []
    by_job = {h.job_id: h for h in got}
    assert set(by_job) == {first.job_id, second.job_id, third.job_id}
    assert by_job[first.job_id].closed and by_job[first.job_id].result == "incorrect"
    assert not by_job[second.job_id].closed and by_job[second.job_id].result == "running"
    assert by_job[third.job_id].result == "retry" and by_job[third.job_id].lane == "h/cpu:1"
    # Two holds of one lane at once, as a worker that ran two executors on one device would leave them.
    assert [(o.first.job_id, o.second.job_id) for o in timeline.overlaps(got)] == [(first.job_id, second.job_id)]


def test_a_verdict_executed_without_a_stamp_is_counted_not_placed(db):
    batch = insert_jobs(db, 1)
    (c,) = q.claim(db, "w1", 1, lease_s=60)
    assert q.advance(db, c.token, JobState.RUNNING)
    assert q.finish(db, c.token, verdict(), "w1", q.RetryPolicy()).value == "verdict"
    with db.transaction(read_only=True) as s:
        assert timeline.load_holds(s, batch_id=batch) == []
        assert timeline.executed_without_hold(s, batch_id=batch) == 1


# --- two real worker processes, one device each, one PostgreSQL ------------------------------------------


@pytest.mark.parametrize("db_url", ["postgresql"], indirect=True)
def test_two_workers_claim_every_job_once_and_never_share_a_device(db, spawn):
    total = 8
    workers = [spawn("worker", JUDGE_DEVICES="cpu:0"), spawn("worker", JUDGE_DEVICES="cpu:1")]

    def registered() -> int:
        with db.transaction(read_only=True) as s:
            return s.scalar(select(func.count()).select_from(WorkerRow).where(WorkerRow.stopped_at.is_(None)))

    # Both are polling before the jobs exist, so neither has a head start.
    wait_for(lambda: registered() == 2, 120, "both workers to register")
    batch = insert_jobs(db, total)

    def done() -> bool:
        with db.transaction(read_only=True) as s:
            return s.scalar(select(func.count()).select_from(Job).where(Job.state == JobState.DONE)) == total

    wait_for(done, 600, f"{total} verdicts")
    for w in workers:
        assert w.terminate() == 0, w.output()
    with db.transaction(read_only=True) as s:
        claims = s.scalars(select(Job.claims)).all()
        attempts = s.execute(select(JobAttempt.job_id, JobAttempt.outcome, JobAttempt.worker_id,
                                    JobAttempt.device)).all()
        verdicts = s.execute(select(VerdictRow.status, VerdictRow.diagnosis, VerdictRow.device)).all()
        got = timeline.load_holds(s, batch_id=batch)
        unplaced = timeline.executed_without_hold(s, batch_id=batch)
    assert claims == [1] * total
    assert len(attempts) == total and len({a.job_id for a in attempts}) == total
    assert {a.outcome for a in attempts} == {"verdict"}
    # Judged for real, on the CPU: the wrong direction fails its trials (not, say, a device mismatch).
    assert [v.status for v in verdicts] == [Status.INCORRECT] * total
    assert all("trials failed" in v.diagnosis and v.device == "cpu" for v in verdicts), verdicts[0]
    host = socket.gethostname()
    assert len(got) == total and unplaced == 0 and all(h.closed for h in got)
    assert {h.lane for h in got} == {f"{host}/cpu:0", f"{host}/cpu:1"}, "both workers judged"
    # One worker per lane: a lane's holds all come from the worker given that device.
    assert all(len({h.worker_id for h in hs}) == 1 for hs in timeline.by_lane(got).values())
    assert timeline.overlaps(got) == []
    start, end = timeline.span(got)
    fractions = timeline.busy_fraction(got, start, end)
    assert all(0 < f <= 1 for f in fractions.values())
    assert all(h.seconds > 0.5 for h in got)  # each hold is a real sandboxed execution, not an instant
