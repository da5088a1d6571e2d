"""Fixtures for the pages: judged submissions written straight into a database, a real API process per
module, and one headless Chromium per module (Debian's, driven by Playwright; never downloaded).
"""

from __future__ import annotations

import datetime as dt
import hashlib
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from reference import get_task
from scripts.seed_demo import insert
from service.db.migrate import upgrade
from service.db.models import ApiKey, Batch, Job, Submission, new_id
from service.db.session import Database
from service.queue.states import JobState
from tests.service.conftest import ADMIN_KEY, Proc, free_port, wait_api
from tests.service.conftest import client, db, judge_dirs, settings, spawn, live_api  # noqa: F401 (fixtures reused)

CHROMIUM = os.environ.get("JUDGE_TEST_CHROMIUM", "/usr/bin/chromium")
T0 = dt.datetime(2026, 11, 20, 12, 0)


def verdict(task: str, code: str, median: float | None, *, status: str = "correct", iqr: float = 0.002,
            isolation: str = "bwrap", device: str = "NVIDIA H100 80GB HBM3", extra: tuple[int, int] = (3, 3),
            eager: float = 3.9, compile_: float = 0.75, **fields: Any) -> dict:
    """A verdict as the sandbox writes it (model_dump(mode="json")), timed when `median` is given.

    `device` is the device model; one named "cpu:..." (as sandbox.environment names a CPU) was judged on the
    torch device "cpu" at the task's CPU shape, any other on "cuda:0" at the official shape, as the sandbox
    does (sandbox/execution/run.py): the trials carry that shape, which the pages label the timings with."""
    perf = None
    if median is not None:
        def stats(ms: float, half: float) -> dict:
            return {"median_ms": ms, "q25_ms": ms - half, "q75_ms": ms + half, "min_ms": ms - half, "mean_ms": ms,
                    "reps": 100, "ci95_ms": None}
        perf = {"candidate": stats(median, iqr / 2), "baselines": {"eager": stats(eager, 0.001),
                                                                  "compile": stats(compile_, 0.001)},
                "speedups": {"eager": eager / median, "compile": compile_ / median}, "min_bytes": 2 << 30,
                "bandwidth_bytes_per_s": 3e12, "speed_of_light_fraction": (2 << 30) / 3e12 * 1e3 / median,
                "peak_memory_bytes": 1 << 20, "reference_peak_memory_bytes": 4 << 30}
    shapes = [{"trial": i, "distribution": "official", "shape": [64, 100], "seed": i, "passed": i < extra[0]}
              for i in range(extra[1])]
    torch_device = "cpu" if device.startswith("cpu") else "cuda:0"
    timed_at = get_task(task).cpu_shape if torch_device == "cpu" else get_task(task).official_shape
    trials = [{"trial": i, "distribution": d, "shape": list(timed_at), "seed": 7 + i,
               "passed": status == "correct" or i > 0} for i, d in enumerate(("official", "peaked"))
              if status in ("correct", "incorrect")]
    return {"status": status, "diagnosis": fields.pop("diagnosis", status), "task": task, "device": torch_device,
            "source_sha256": hashlib.sha256(code.encode()).hexdigest(), "extra_shapes": shapes, "performance": perf,
            "trials": fields.pop("trials", trials),
            "environment": {"device": torch_device, "device_name": device, "torch": "2.11.0", "python": "3.12",
                            "isolation": isolation}, **fields}


class Seeder:
    """Writes judged submissions: `add(who, model, code, median, ...)` returns the submission id."""

    def __init__(self, database: Database) -> None:
        self.db, self.keys, self.n = database, {}, 0

    def key(self, session, who: str) -> ApiKey:  # noqa: ANN001
        if who not in self.keys:
            key = ApiKey(id=new_id(), submitter=who, prefix="kj_test", key_hash=hashlib.sha256(
                f"{who}{new_id()}".encode()).hexdigest())
            session.add(key)
            session.flush()
            self.keys[who] = key
        return session.merge(self.keys[who])

    def add(self, who: str, model: str | None, code: str, median: float | None, task: str = "kl_div",
            source: str | None = None, tags: list | None = None, batch: object = None, public: bool = False,
            sample_index: int | None = None, **kw: Any) -> str:
        """`public`: its submitter made its source public (else the page shows the verdict only)."""
        self.n += 1
        with self.db.transaction() as session:
            key = self.key(session, who)
            sub_id = insert(session, key, task, source or code, verdict(task, code, median, **kw),
                            T0 + dt.timedelta(minutes=self.n), model, tags,
                            session.get(type(batch), batch.id) if batch is not None else None)
            sub = session.get(Submission, sub_id)
            sub.public, sub.sample_index = public, sample_index
            return sub_id

    def batch(self, who: str, name: str | None = None, cancelled_at: dt.datetime | None = None) -> Batch:
        with self.db.transaction() as session:
            owner = self.key(session, who)
            batch = Batch(id=new_id(), name=name, api_key_id=owner.id, submitter=owner.submitter, tags=[], total=0,
                          duplicates=0, rejected=[], cancelled_at=cancelled_at)
            session.add(batch)
        return batch

    def unjudged(self, batch: Batch, model: str | None, code: str, state: JobState = JobState.QUEUED,
                 duplicate_of: str | None = None, task: str = "kl_div") -> str:
        """The next sample of `batch` without a verdict: its job in `state`, or, as a duplicate of a sample
        with the same code, no job of its own (it shows that sample's job and verdict)."""
        self.n += 1
        with self.db.transaction() as session:
            held = session.get(Batch, batch.id)
            held.total += 1
            held.duplicates += duplicate_of is not None
            sub = Submission(id=new_id(), task_id=task, source=code, text_sha256=hashlib.sha256(
                code.encode()).hexdigest(), api_key_id=self.key(session, held.submitter).id, submitter=held.submitter,
                model=model, created_at=T0 + dt.timedelta(minutes=self.n), batch_id=batch.id, line=held.total,
                duplicate_of=duplicate_of)
            session.add(sub)
            session.flush()
            if duplicate_of is None:
                session.add(Job(submission_id=sub.id, task_id=task, state=state, queued_at=sub.created_at,
                                not_before=sub.created_at, claims=0,
                                finished_at=sub.created_at if state is JobState.CANCELLED else None))
            return sub.id


@pytest.fixture
def seeder(request: pytest.FixtureRequest) -> Seeder:
    return Seeder(request.getfixturevalue("db"))  # the service fixture: this test's SQLite or PostgreSQL


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Seeder]]:
    """A real API process (uvicorn) on a fresh SQLite database, and a seeder writing into that database."""
    root = tmp_path_factory.mktemp("site")
    url = f"sqlite:///{root / 'judge.db'}"
    upgrade(url)
    database = Database(url)
    port = free_port()
    env = {**os.environ, "DATABASE_URL": url, "JUDGE_ADMIN_KEY": ADMIN_KEY, "JUDGE_SSE_POLL_S": "0.05"}
    proc = Proc([sys.executable, "-m", "uvicorn", "service.main:create_app", "--factory", "--host", "127.0.0.1",
                 "--port", str(port)], env, root / "api.log")
    base = f"http://127.0.0.1:{port}"
    try:
        wait_api(proc, base)
        yield base, Seeder(database)
    finally:
        proc.close()
        database.dispose()


@pytest.fixture(scope="module")
def browser() -> Iterator[object]:
    from playwright.sync_api import sync_playwright

    if not Path(CHROMIUM).exists():
        pytest.fail(f"{CHROMIUM} is missing: apt-get install -y chromium (Debian's; Playwright never downloads one)")
    with sync_playwright() as p:
        chromium = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        yield chromium
        chromium.close()


@pytest.fixture
def page(browser) -> Iterator[object]:  # noqa: ANN001
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    pg = context.new_page()
    dialogs: list[str] = []
    pg.on("dialog", lambda d: (dialogs.append(d.message), d.dismiss()))
    pg.dialogs = dialogs  # what an injected alert() would have shown: tests assert it stays empty
    yield pg
    context.close()
