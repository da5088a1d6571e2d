"""A stop signal never deadlocks a worker, whatever its main thread holds when the signal arrives.

Python runs a signal handler in the main thread between two bytecodes, so the handler can interrupt code that
holds a lock: the claim loop is often inside `threading.Event.wait` or `clear` of its wake-up Event, which hold
that Event's lock. A handler that stops the worker itself sets that Event, and so waits for a lock its own thread
holds. Seen in the drill test_drills.py::test_a_killed_serve_lets_its_worker_finish_the_running_job: `serve`
SIGKILLed, the worker's executor thread finished the job and stored `correct`, but the main thread hung in the
handler (its stack: the handler, then Condition.__enter__) and the worker never exited. Here the lock is held on
purpose while the signal comes, in a child process, so a deadlock is a timeout, not a hung test run.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow  # a real worker in a child process

CHILD = r"""
import os, signal, sys
from service.core.config import Settings
from service.db.session import Database
from service.worker.judging import CompileOnlyJudge, judge_config
from service.worker.runner import Worker

settings = Settings(database_url=sys.argv[1])
worker = Worker(Database(settings.db_url), settings, CompileOnlyJudge(judge_config(settings)), ["cpu"], worker_id="w")
worker.install_signal_handlers()
with worker.wake._cond:  # what the claim loop holds inside wake.wait() and wake.clear()
    os.kill(os.getpid(), signal.SIGTERM)
    for _ in range(100_000):  # the handler runs between these bytecodes, while the lock is held
        pass
print("handler returned", flush=True)
sys.exit(0 if worker.stopping.wait(30) else 3)
"""


def test_a_stop_signal_while_the_loop_holds_its_wake_up_lock_still_stops_the_worker(tmp_path: Path) -> None:
    child = subprocess.Popen([sys.executable, "-c", CHILD, f"sqlite:///{tmp_path / 'w.db'}"],
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                             cwd=Path(__file__).resolve().parents[2])
    try:
        out, _ = child.communicate(timeout=40)
    except subprocess.TimeoutExpired:
        child.kill()
        out, _ = child.communicate()
        raise AssertionError(f"the worker deadlocked in its signal handler:\n{out}") from None
    assert "handler returned" in out and child.returncode == 0, out  # 3: the signal never stopped the worker
