"""Builder workers apart from run workers (issue 43), with real processes on both databases.

A builder (`worker --role build`) and a run worker (`worker --role run`) with separate build roots, so no build
reaches the run worker through a shared disk: every build it runs travels as an artifact through the database. The
CPU corpus is judged to its declared verdicts; a builder SIGKILLed in the middle of a build loses nothing; a
tampered artifact (bytes changed after publish, or a manifest for another key) is refused, and the verdict is still
the candidate's own. The cache root, which holds only what the judge builds and measures itself (the trusted
precompiled headers, the baselines), is the session's: no candidate's build is in it. The queue's stage rules are
checked in-process on both databases.
"""

from __future__ import annotations

import json
import re
import uuid
from pathlib import Path

import pytest
from sqlalchemy import select, update

from sandbox import artifacts
from service import crud
from service.api.schemas import SubmissionCreate
from service.artifacts import store
from service.db.models import ArtifactRow, Job, JobAttempt, VerdictRow, WorkerRow
from service.db.session import Database
from service.queue import claims as q
from service.queue.states import JobState, Stage
from tests.service.conftest import CORPUS, wait_for

CPU = CORPUS / "cpu"
DECLARED = {"kl_div_cpp_correct.py": "correct", "compile_error.py": "compile_error",
            "kl_div_wrong_direction.py": "incorrect"}


def declared(path: Path) -> str:
    """The verdict a corpus file declares (`expect:` in its header)."""
    return re.search(r"^expect:\s*(\S+)", path.read_text(), re.M).group(1)


def submit(db: Database, path: Path, note: str = "") -> str:
    """A submission straight through the service's own code (crud), as the API makes one; `note` makes the text,
    and so the build key, the test's own."""
    source = path.read_text() + (f"\n# {note}\n" if note else "")
    task = re.search(r"^task:\s*(\S+)", source, re.M).group(1)
    with db.transaction() as session:
        key = crud.create_key(session, "builders")[0]
        return crud.create_submission(session, key, SubmissionCreate(task=task, source=source)).submission.id


def job_of(db: Database, submission_id: str) -> Job:
    with db.transaction(read_only=True) as s:
        return s.scalars(select(Job).where(Job.submission_id == submission_id)).one()


def status_of(db: Database, submission_id: str) -> str | None:
    with db.transaction(read_only=True) as s:
        row = s.scalars(select(VerdictRow).where(VerdictRow.submission_id == submission_id)).first()
        return None if row is None else row.status.value


def attempts_of(db: Database, submission_id: str) -> list[tuple[str, str | None]]:
    with db.transaction(read_only=True) as s:
        job_id = s.scalar(select(Job.id).where(Job.submission_id == submission_id))
        return [(a.worker_id, a.outcome) for a in s.scalars(select(JobAttempt).where(JobAttempt.job_id == job_id)
                                                            .order_by(JobAttempt.id))]


def worker_stats(db: Database, pid: int) -> dict:
    with db.transaction(read_only=True) as s:
        return s.scalars(select(WorkerRow.stats).where(WorkerRow.pid == pid)).one()


def builder(spawn, judge_dirs: dict[str, str], tmp_path: Path, name: str = "builder"):
    """A builder with its own build root and the session's cache root (its trusted precompiled headers: a build
    without them cost ~40 s a time on the 2-core CI machine, with them ~7 s). What matters here is that every build
    travels as an artifact, which the build roots being apart makes certain."""
    return spawn("worker", JUDGE_ROLE="build", JUDGE_BUILD_ROOT=str(tmp_path / name / "builds"),
                 JUDGE_CACHE_ROOT=judge_dirs["JUDGE_CACHE_ROOT"])


def run_worker(spawn, judge_dirs: dict[str, str], tmp_path: Path, name: str = "runner", *, headers: bool = False):
    """A run worker: its own build root; the session's baseline cache (the CPU baselines are measured once per test
    run, and a builder never reads them). `headers`: the session's precompiled headers for what it builds itself."""
    return spawn("worker", JUDGE_ROLE="run", JUDGE_BUILD_ROOT=str(tmp_path / name / "builds"),
                 JUDGE_CACHE_ROOT=judge_dirs["JUDGE_CACHE_ROOT"], JUDGE_PRECOMPILED_HEADERS="1" if headers else "0")


def registered(db: Database, role: str) -> bool:
    with db.transaction(read_only=True) as s:
        return s.scalar(select(WorkerRow.id).where(WorkerRow.role == role, WorkerRow.stopped_at.is_(None))) is not None


# --- the queue's stages, in-process on both databases ---------------------------------------------------------


def test_claims_are_per_stage_and_a_publish_hands_the_job_to_the_run_stage(db):
    first, second = submit(db, CPU / "kl_div_wrong_direction.py", "a"), submit(db, CPU / "kl_div_wrong_direction.py",
                                                                                 "b")
    assert q.claim(db, "runner", 2, lease_s=60, stage=Stage.RUN) == []  # nothing is built yet
    (built,) = q.claim(db, "builder", 1, lease_s=60, stage=Stage.BUILD)
    assert built.artifact_sha256 is None
    sha = store.put(db, "k" * 64, b"bytes", "builder")
    assert q.publish(db, built.token, "k" * 64, sha, compile_cached=False)
    assert not q.publish(db, built.token, "k" * 64, sha, compile_cached=False)  # the token is spent
    job = job_of(db, built.submission_id)
    assert job.state is JobState.QUEUED and job.artifact_sha256 == sha and job.worker_id is None
    assert attempts_of(db, built.submission_id) == [("builder", "built")]
    (other,) = q.claim(db, "builder", 2, lease_s=60, stage=Stage.BUILD)  # the built job is not the builder's
    assert other.submission_id == ({first, second} - {built.submission_id}).pop()
    (ran,) = q.claim(db, "runner", 2, lease_s=60, stage=Stage.RUN)
    assert (ran.submission_id, ran.build_key, ran.artifact_sha256) == (built.submission_id, "k" * 64, sha)
    # Released by the run worker (shutdown): still in the run stage, the artifact kept.
    assert q.release(db, ran.token)
    assert q.claim(db, "builder", 2, lease_s=60, stage=Stage.BUILD) == []
    assert [c.submission_id for c in q.claim(db, "all", 2, lease_s=60)] == [built.submission_id]


def test_a_lost_builders_job_returns_to_the_build_stage(db):
    sub = submit(db, CPU / "kl_div_wrong_direction.py", "lost")
    (held,) = q.claim(db, "builder", 1, lease_s=0.01, stage=Stage.BUILD)
    wait_for(lambda: q.claim(db, "runner", 1, lease_s=60, stage=Stage.RUN) == [] and
             (taken := q.claim(db, "builder2", 1, lease_s=60, stage=Stage.BUILD)) and taken, 10,
             "the expired build to be claimed again by a builder")
    assert attempts_of(db, sub) == [("builder", "expired"), ("builder2", None)]
    assert not q.publish(db, held.token, "k" * 64, "0" * 64, compile_cached=False)  # the lost builder's late publish


def test_the_store_keeps_an_intact_artifact_and_replaces_an_altered_one(db):
    first = store.put(db, "a" * 64, b"one", "b1")
    assert store.put(db, "a" * 64, b"two", "b2") == first  # intact: reused, whatever the second builder made
    with db.transaction() as s:
        s.execute(update(ArtifactRow).where(ArtifactRow.build_key == "a" * 64).values(data=b"altered"))
    assert store.put(db, "a" * 64, b"two", "b2") == store.digest(b"two")
    assert store.get(db, "a" * 64).data == b"two" and store.get(db, "b" * 64) is None


# --- real processes ------------------------------------------------------------------------------------------


@pytest.mark.both_databases  # the hand-over between roles, through each back end
@pytest.mark.timeout(900)
def test_a_builder_and_a_run_worker_judge_the_cpu_corpus_through_artifacts(db, spawn, judge_dirs, tmp_path):
    build = builder(spawn, judge_dirs, tmp_path)
    wait_for(lambda: registered(db, "build"), 120, "the builder to register")
    run = run_worker(spawn, judge_dirs, tmp_path)
    subs = {name: submit(db, CPU / name, f"builders {tmp_path.name}") for name in DECLARED}
    wait_for(lambda: all(status_of(db, s) for s in subs.values()), 800, "every verdict")
    assert {name: status_of(db, s) for name, s in subs.items()} == {n: declared(CPU / n) for n in DECLARED}
    assert DECLARED == {n: declared(CPU / n) for n in DECLARED}
    build.terminate()
    run.terminate()
    # The builder built every job; the compile error was its verdict, the others went on as artifacts.
    assert [o for _, o in attempts_of(db, subs["compile_error.py"])] == ["verdict"]
    for name in ("kl_div_cpp_correct.py", "kl_div_wrong_direction.py"):
        (builder_attempt, run_attempt) = attempts_of(db, subs[name])
        assert builder_attempt == (f"{builder_id(db, build.pid)}", "built") and run_attempt[1] == "verdict"
        assert job_of(db, subs[name]).artifact_sha256 is not None
    assert worker_stats(db, build.pid)["artifacts"] == {"published": 2}
    assert worker_stats(db, run.pid)["artifacts"] == {"installed": 2}
    # The run worker executed the builder's build, unpacked in its own build root: its execution child found it
    # built for the command line it runs (no `stale_build`: it was not built again there).
    correct = job_of(db, subs["kl_div_cpp_correct.py"]).build_key
    ran, built = (tmp_path / name / "builds" / correct / "build" for name in ("runner", "builder"))
    assert sorted(p.name for p in ran.rglob("*.so")) == sorted(p.name for p in built.rglob("*.so")) != []
    with db.transaction(read_only=True) as s:
        verdict = s.scalars(select(VerdictRow.verdict).where(VerdictRow.submission_id == subs["kl_div_cpp_correct.py"]
                                                             )).one()
    assert "stale_build" not in verdict["details"]


def registered_pid(db: Database, pid: int) -> bool:
    with db.transaction(read_only=True) as s:
        return s.scalar(select(WorkerRow.id).where(WorkerRow.pid == pid)) is not None


def builder_id(db: Database, pid: int) -> str:
    with db.transaction(read_only=True) as s:
        return s.scalars(select(WorkerRow.id).where(WorkerRow.pid == pid)).one()


@pytest.mark.timeout(900)
def test_a_builder_killed_mid_build_loses_nothing(db, spawn, judge_dirs, tmp_path):
    first = builder(spawn, judge_dirs, tmp_path, "b1")
    wait_for(lambda: registered(db, "build"), 120, "the builder to register")
    sub = submit(db, CPU / "kl_div_cpp_correct.py", f"killed {tmp_path.name}")
    # Mid-build: the job is the builder's and its build directory exists, but nothing is stored yet.
    builds = tmp_path / "b1" / "builds"
    wait_for(lambda: any(builds.glob("*/build")) and not any(builds.glob("*/result.json")), 300,
             "the build to start")
    first.kill9()
    second = builder(spawn, judge_dirs, tmp_path, "b2")
    # The run worker comes once the second builder is alive, so the job is the builders' (a run worker with no
    # builder alive would build it itself, which is the next rule, not this test's).
    wait_for(lambda: registered_pid(db, second.pid), 120, "the second builder to register")
    run = run_worker(spawn, judge_dirs, tmp_path)
    wait_for(lambda: status_of(db, sub), 800, "the verdict")
    assert status_of(db, sub) == "correct"
    outcomes = [o for _, o in attempts_of(db, sub)]
    assert outcomes == ["expired", "built", "verdict"], outcomes  # the lost build: no blame, built again
    assert job_of(db, sub).crashes == 0
    second.terminate()
    run.terminate()


@pytest.mark.timeout(900)
@pytest.mark.parametrize("tamper", ["bytes"])  # a manifest for another key: tests/sandbox/test_artifacts.py, and
# the run worker's same refusal path (one process pair each costs CI a full judging)
def test_a_tampered_artifact_is_refused_and_the_verdict_is_the_candidates(db, spawn, judge_dirs, tmp_path, tamper):
    build = builder(spawn, judge_dirs, tmp_path)
    sub = submit(db, CPU / "kl_div_cpp_correct.py", f"tampered {tamper} {tmp_path.name}")
    wait_for(lambda: job_of(db, sub).artifact_sha256, 600, "the build to be published")
    assert build.terminate() == 0
    job = job_of(db, sub)
    if tamper == "bytes":  # changed after publish: the digest the builder recorded no longer matches
        with db.transaction() as s:
            row = s.get(ArtifactRow, job.build_key)
            row.data = row.data[:-1] + bytes([row.data[-1] ^ 0xFF])
    else:  # a well-formed artifact for another key, with the digests made to match (a builder that lies)
        other = tmp_path / "other"
        (other / "sub").mkdir(parents=True)
        (other / "sub" / "lib.so").write_bytes(b"\x7fELF not the candidate's")
        forged = artifacts.pack("f" * 64, other)
        with db.transaction() as s:
            row = s.get(ArtifactRow, job.build_key)
            row.data, row.sha256 = forged, store.digest(forged)
            s.execute(update(Job).where(Job.id == job.id).values(artifact_sha256=store.digest(forged)))
    run = run_worker(spawn, judge_dirs, tmp_path, headers=True)  # no builder alive: it builds what it refuses
    wait_for(lambda: status_of(db, sub), 800, "the verdict")
    assert status_of(db, sub) == "correct"
    run.terminate()
    reason = {"bytes": "digest", "manifest": "key"}[tamper]
    assert worker_stats(db, run.pid)["artifacts"] == {f"refused_{reason}": 1}
    assert f"artifact refused ({reason})" in run.output()
    assert [o for _, o in attempts_of(db, sub)] == ["built", "verdict"]  # rebuilt by the run worker, not retried
    with db.transaction(read_only=True) as s:
        verdict = s.scalars(select(VerdictRow.verdict).where(VerdictRow.submission_id == sub)).one()
    assert json.dumps(verdict).count("not the candidate") == 0


def test_prune_removes_old_artifacts_no_waiting_job_names(db):
    sub = submit(db, CPU / "kl_div_wrong_direction.py", "prune")
    (held,) = q.claim(db, "builder", 1, lease_s=60, stage=Stage.BUILD)
    needed, stale, fresh = (f"{word}{uuid.uuid4().hex}".ljust(64, "0") for word in ("needed", "stale", "fresh"))
    for key in (needed, stale, fresh):
        store.put(db, key, key.encode(), "builder")
    assert q.publish(db, held.token, needed, store.digest(needed.encode()), compile_cached=False)
    old = store.utcnow() - store.PRUNE_AFTER * 2
    with db.transaction() as s:  # (the PostgreSQL database is the session's: only this test's rows are aged)
        s.execute(update(ArtifactRow).where(ArtifactRow.build_key.in_([needed, stale])).values(created_at=old))
    with db.transaction() as s:
        would = store.prune(s, dry_run=True)
    assert store.get(db, stale) is not None and would >= 1
    with db.transaction() as s:
        assert store.prune(s) == would
    assert store.get(db, stale) is None
    assert store.get(db, needed) is not None and store.get(db, fresh) is not None
    assert job_of(db, sub).build_key == needed


def test_an_unknown_role_is_refused_before_anything_starts(monkeypatch, tmp_path):
    from typer.testing import CliRunner

    from service.cli.main import app

    monkeypatch.setenv("DATABASE_URL", f"sqlite:///{tmp_path / 'never.db'}")
    result = CliRunner().invoke(app, ["worker", "--role", "builder", "--no-migrate"])
    assert result.exit_code == 2 and "--role must be one of all, build, run" in result.output
    assert not (tmp_path / "never.db").exists()
