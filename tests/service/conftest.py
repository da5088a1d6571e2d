"""Service fixtures: settings, the app under TestClient, API keys, real worker and API processes.

Worker and API processes are real subprocesses (`python -m service.cli.main worker`, uvicorn) on the
same database as the test. They judge on the CPU at the tasks' CPU size with the real sandbox, sharing
one build cache and one baseline cache per test session.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest
from fastapi.testclient import TestClient

from service import crud
from service.client import JudgeClient, JudgeError
from service.core.config import Settings
from service.db.session import Database
from service.main import create_app

ROOT = Path(__file__).resolve().parents[2]
CORPUS = ROOT / "tests" / "corpus"
CORRECT_KL_DIV = CORPUS / "cpu" / "kl_div_cpp_correct.py"
ADMIN_KEY = "test-admin-key"


def wait_for(condition: Callable[[], object], timeout: float, what: str, interval: float = 0.05) -> object:
    """Poll a real condition until it holds or the deadline passes (never a bare sleep)."""
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}")
        time.sleep(interval)


@pytest.fixture(scope="session")
def judge_dirs(judge_root: Path) -> dict[str, str]:
    root = judge_root
    return {"JUDGE_BUILD_ROOT": str(root / "builds"), "JUDGE_CACHE_ROOT": str(root / "cache")}


@pytest.fixture
def settings(db_url: str) -> Settings:
    return Settings(database_url=db_url, admin_key=ADMIN_KEY, rate_limit_per_minute=6000, rate_limit_burst=1000,
                    sse_poll_s=0.05)


@pytest.fixture
def db(settings: Settings) -> Iterator[Database]:
    database = Database(settings.db_url)
    yield database
    database.dispose()


@pytest.fixture
def client(settings: Settings) -> Iterator[TestClient]:
    with TestClient(create_app(settings)) as test_client:
        yield test_client


def new_key(db: Database, submitter: str) -> str:
    """Mint an API key straight in the database (its own transaction); returns the secret."""
    with db.transaction() as session:
        return crud.create_key(session, submitter)[1]


@pytest.fixture
def api_key(db: Database) -> str:
    return new_key(db, "alice")


@pytest.fixture
def auth(api_key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {api_key}"}


class Proc:
    """A child process in its own session, so kill -9 takes its sandbox children with it."""

    def __init__(self, argv: list[str], env: dict[str, str], log: Path, cwd: Path = ROOT) -> None:
        self.log = log
        self._out = open(log, "wb")
        self.popen = subprocess.Popen(argv, env=env, stdout=self._out, stderr=subprocess.STDOUT, cwd=cwd,
                                      start_new_session=True)

    @property
    def pid(self) -> int:
        return self.popen.pid

    def kill9(self) -> None:
        os.killpg(self.popen.pid, signal.SIGKILL)
        self.popen.wait(30)

    def terminate(self, timeout: float = 60) -> int:
        if self.popen.poll() is None:
            self.popen.send_signal(signal.SIGTERM)
        return self.popen.wait(timeout)

    def output(self) -> str:
        self._out.flush()
        return self.log.read_text(errors="replace")

    def close(self) -> None:
        if self.popen.poll() is None:
            try:
                os.killpg(self.popen.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            self.popen.wait(30)
        self._out.close()


@pytest.fixture
def spawn(db_url: str, judge_dirs: dict[str, str], tmp_path: Path) -> Iterator[Callable[..., Proc]]:
    """Start real worker or API processes on the test's database; all are killed at the end."""
    procs: list[Proc] = []

    def start(kind: str, **env_overrides: str) -> Proc:
        env = {**os.environ, **judge_dirs, "DATABASE_URL": db_url, "JUDGE_DEVICES": "cpu",
               "JUDGE_COMPILE_WORKERS": "1", "JUDGE_LEASE_S": "3", "JUDGE_POLL_S": "0.05",
               "JUDGE_TIMING_BUDGET_MS": "100", "JUDGE_TRIALS_PER_DISTRIBUTION": "1",
               "JUDGE_SHUTDOWN_GRACE_S": "60", "JUDGE_ADMIN_KEY": ADMIN_KEY, "JUDGE_LOG_LEVEL": "INFO",
               **env_overrides}
        if kind == "worker":
            argv = [sys.executable, "-m", "service.cli.main", "worker", "--no-migrate"]
        else:
            argv = [sys.executable, "-m", "uvicorn", "service.main:create_app", "--factory", "--host", "127.0.0.1",
                    "--port", env_overrides["PORT"]]
        proc = Proc(argv, env, tmp_path / f"{kind}-{len(procs)}.log")
        procs.append(proc)
        return proc

    yield start
    for proc in procs:
        proc.close()


class InProcessTransport(httpx.BaseTransport):
    """An httpx transport that sends each request through a TestClient, so the project's own clients (built on
    httpx) talk to the real app in-process. The TestClient's own transport cannot be lent to them: Starlette's
    test client is built on its own HTTP library (httpx2 from Starlette 1.10), whose responses httpx refuses."""

    def __init__(self, test_client: TestClient) -> None:
        self.test_client = test_client

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        answer = self.test_client.request(request.method, str(request.url), headers=request.headers.multi_items(),
                                          content=request.read())
        return httpx.Response(answer.status_code, headers=answer.headers.multi_items(), content=answer.content,
                              request=request)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_api(proc: Proc, base: str, timeout: float = 60) -> None:
    """Wait until the API process at `base` answers /readyz (failing at once if it died)."""
    with JudgeClient(base, key="") as judge:
        try:
            judge.wait_ready(timeout, alive=lambda: proc.popen.poll() is None)
        except JudgeError as exc:
            pytest.fail(f"{exc}\n{proc.output()}")


@pytest.fixture
def live_api(spawn: Callable[..., Proc]) -> Callable[[], tuple[Proc, str]]:
    """Start (or restart) a real uvicorn API process; returns it and its base URL once it answers."""
    port = str(free_port())

    def start() -> tuple[Proc, str]:
        proc = spawn("api", PORT=port)
        base = f"http://127.0.0.1:{port}"
        wait_api(proc, base)
        return proc, base

    return start
