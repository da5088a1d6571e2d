"""Fixtures of the trainer-adapter tests: real judge services the adapters talk to over HTTP.

`judge`: one API process and one worker, started on first use and kept for the folder's tests, shared by every
adapter's tests (SQLite: the adapters are HTTP clients, and both databases are covered by the service's own
reward tests), judging on the CPU at the tasks' CPU size with the real sandbox and the run's shared build cache.
Tests that count what they created (batches, submissions) count what is new since they started, so sharing it
changes no assertion.
`idle_judge` (kept the same way): an API process with no worker, so a reward call can only come back at
its deadline. `dead_judge`: an API process whose database does not answer, so every reward call gets a 503
with Retry-After. All are real subprocesses, killed when the folder's tests are done.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from service import crud
from service.db.migrate import upgrade
from service.db.session import Database
from tests.service.conftest import ADMIN_KEY, CORPUS, CORRECT_KL_DIV, ROOT, Proc, free_port, wait_api, wait_for

CORRECT = CORRECT_KL_DIV.read_text()
COMPLETION_OF_CORRECT = f"Here is my kernel.\n\n```python\n{CORRECT}```\nIt should be fast.\n"
WRONG = (CORPUS / "cpu" / "kl_div_wrong_direction.py").read_text()
HACK = '''import torch
import torch.nn as nn
import torch.nn.functional as F


class ModelNew(nn.Module):
    def forward(self, predictions, targets):
        return F.kl_div(torch.log(predictions), targets, reduction="batchmean")
'''
"""Calls the reference operator: a policy violation, caught before anything is built."""
PROSE = "I could not write the kernel."


@dataclass
class Judge:
    url: str
    key: str
    procs: list[Proc]

    def running(self) -> bool:
        return all(proc.popen.poll() is None for proc in self.procs)

    def close(self) -> None:
        for proc in self.procs:
            proc.close()


def _env(db_url: str, root: Path, **overrides: str) -> dict[str, str]:
    # These tests prove that verdicts travel through the adapters, not how well kernels are timed (tests/sandbox
    # does): a timing budget of 1 ms times a correct kernel min_reps (10) times instead of the CPU's cpu_max_reps
    # (30; with 100, as it once was, 45 s of timing on this loaded 2-core machine, ~5 with 10); and a pre-started
    # judge child per worker takes the ~13 s start (an interpreter with torch) off each correct kernel's clock. Both
    # are the judge's own settings, its cold path is covered in tests/service.
    return {**os.environ, "JUDGE_BUILD_ROOT": str(root / "builds"), "JUDGE_CACHE_ROOT": str(root / "cache"),
            "DATABASE_URL": db_url, "JUDGE_DEVICES": "cpu", "JUDGE_COMPILE_WORKERS": "1", "JUDGE_LEASE_S": "30",
            "JUDGE_POLL_S": "0.05", "JUDGE_TIMING_BUDGET_MS": "1", "JUDGE_TRIALS_PER_DISTRIBUTION": "1",
            "JUDGE_WARM_SPARES": "1", "JUDGE_ADMIN_KEY": ADMIN_KEY, "JUDGE_LOG_LEVEL": "INFO", **overrides}


def _api(db_url: str, root: Path, log_dir: Path, **overrides: str) -> tuple[Proc, str]:
    port = str(free_port())
    argv = [sys.executable, "-m", "uvicorn", "service.main:create_app", "--factory", "--host", "127.0.0.1",
            "--port", port]
    proc = Proc(argv, _env(db_url, root, **overrides), log_dir / f"api-{port}.log")
    return proc, f"http://127.0.0.1:{port}"


def _database(path: Path) -> tuple[str, str]:
    url = f"sqlite:///{path}"
    upgrade(url)
    database = Database(url)
    with database.transaction() as session:
        key = crud.create_key(session, "trainer")[1]
    database.dispose()
    return url, key


_STARTED: dict[str, Judge] = {}
"""The run-long judges, by name, started on first use. They are stopped after each stretch of this folder's tests
(`pytest_runtest_teardown`), so that the worker's polling and its spare's restarts do not run beside the rest of
the suite (~7% of a core for its whole length, on a 2-core machine that times CPU kernels); a test of this folder
that comes later (another file's turn under pytest-xdist, or `-k`) starts them again."""


def _stop_judges() -> None:
    for started in _STARTED.values():
        started.close()
    _STARTED.clear()


def pytest_runtest_teardown(item: pytest.Item, nextitem: pytest.Item | None) -> None:
    if _STARTED and (nextitem is None or Path(str(nextitem.path)).parent != Path(__file__).parent):
        _stop_judges()


def pytest_sessionfinish(session: pytest.Session) -> None:
    _stop_judges()


def _running(name: str, root: Path, factory: pytest.TempPathFactory, *, worker: bool) -> Judge:
    """The judge `name`, started now if it is not running (never started, stopped, or one of its processes
    died): an API on a fresh SQLite database, and a worker if asked."""
    started = _STARTED.get(name)
    if started is not None:
        if started.running():
            return started
        started.close()
    tmp = factory.mktemp(name)
    url, key = _database(tmp / "judge.db")
    api, base = _api(url, root, tmp)
    procs = [api]
    if worker:
        procs.append(Proc([sys.executable, "-m", "service.cli.main", "worker", "--no-migrate"], _env(url, root),
                          tmp / "worker.log"))
    started = _STARTED[name] = Judge(base, key, procs)  # stopped by the hooks above even if the API never answers
    wait_api(api, base)
    return started


@pytest.fixture
def judge(judge_root: Path, tmp_path_factory: pytest.TempPathFactory) -> Judge:
    return _running("judge", judge_root, tmp_path_factory, worker=True)


@pytest.fixture
def idle_judge(judge_root: Path, tmp_path_factory: pytest.TempPathFactory) -> Judge:
    return _running("idle", judge_root, tmp_path_factory, worker=False)


@pytest.fixture
def dead_judge(judge_root: Path, tmp_path: Path) -> Iterator[Judge]:
    """PostgreSQL on a port where nothing listens: the API starts, and answers 503 where it needs the database."""
    port = free_port()
    api, base = _api(f"postgresql+psycopg://postgres@127.0.0.1:{port}/none", judge_root, tmp_path)
    try:
        def answering() -> bool:
            assert api.popen.poll() is None, api.output()
            try:
                return httpx.get(f"{base}/healthz", timeout=2).status_code == 200
            except httpx.TransportError:
                return False

        wait_for(answering, 60, "the API to answer /healthz")
        yield Judge(base, "kj_unknown", [api])
    finally:
        api.close()


def doc_block(section: str, language: str, page: str = "docs/integrations.md") -> str:
    """The first `language` code block under `## {section}` of `page`: the text a user copies."""
    text = (ROOT / page).read_text()
    body = text.split(f"\n## {section}\n", 1)[1].split("\n## ", 1)[0]
    return body.split(f"```{language}\n", 1)[1].split("```", 1)[0]
