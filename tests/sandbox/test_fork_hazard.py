"""No Python runs between fork and exec in the judge, tested for real.

A worker is multi-threaded (compile pool, output readers, watchdogs). `subprocess.Popen(preexec_fn=...)`
makes CPython take the import lock and run the `os.register_at_fork` before-handlers (logging's takes
logging's module lock) around the fork, so one thread holding either lock stalls every other thread's
sandbox start for as long as it holds it (issue 24: a worker deadlocked for minutes). Here one thread holds
each lock for as long as the test wants while another starts real sandboxes, which must finish while the
lock is still held. The same test against `Popen(["true"], preexec_fn=lambda: None)` blocks until the lock
is released. A source scan keeps `preexec_fn` and `os.fork` out of the judge and the service, and the trusted
baseline measurement, which asks for its own death signal after exec, is checked to die with its worker.
"""

from __future__ import annotations

import _imp
import io
import logging
import os
import subprocess
import sys
import threading
import tokenize
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from sandbox import isolation, sandboxed_process
from sandbox.execution import baseline
from sandbox.isolation import Limits, SandboxSpec

pytestmark = pytest.mark.slow  # real worker threads starting real children

REPO = Path(__file__).resolve().parents[2]
LIMITS = Limits(wall_s=30, memory_bytes=512 << 20, max_pids=64, output_bytes=64 << 10, tmp_bytes=8 << 20,
                file_size_bytes=4 << 20)
ENV = {"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8"}
START_S = 30.0
"""How long a start of `true` may take while the lock is held: far above the ~0.2 s it takes under bwrap
on a loaded 2-core machine, and finite, so a start that waits for the lock fails instead of hanging."""

FORK_LOCKS: dict[str, tuple[Callable[[], object], Callable[[], object]]] = {
    "import": (_imp.acquire_lock, _imp.release_lock),  # PyOS_BeforeFork takes it
    "logging": (logging._lock.acquire, logging._lock.release),  # logging's at-fork before-handler takes it
}


@contextmanager
def held_by_another_thread(lock: str) -> Iterator[None]:
    """`lock` is held by a thread of its own until the block ends (then released, in every case)."""
    acquire, release = FORK_LOCKS[lock]
    held, done = threading.Event(), threading.Event()

    def hold() -> None:
        acquire()
        try:
            held.set()
            done.wait()
        finally:
            release()

    holder = threading.Thread(target=hold, daemon=True)
    holder.start()
    assert held.wait(timeout=START_S), f"the {lock} lock could not be taken"
    try:
        yield
    finally:
        done.set()
        holder.join(timeout=START_S)


@pytest.mark.parametrize("mechanism", ["none", "bwrap"])
@pytest.mark.parametrize("lock", FORK_LOCKS)
def test_sandbox_starts_while_another_thread_holds_a_fork_lock(tmp_path: Path, lock: str, mechanism: str) -> None:
    spec = SandboxSpec(argv=["true"], env=ENV, writable_dir=tmp_path / "build", limits=LIMITS, cwd="/")
    mechanism = isolation.available_mechanism(mechanism)  # bwrap must work (CI installs it)
    # Once before the lock is taken, so that the probes and any first import are done: only the start
    # itself is under test.
    assert sandboxed_process.run(spec, mechanism).returncode == 0
    results: list[sandboxed_process.Completed] = []
    starter = threading.Thread(target=lambda: results.append(sandboxed_process.run(spec, mechanism)), daemon=True)
    with held_by_another_thread(lock):
        starter.start()
        starter.join(timeout=START_S)
        finished_while_held = not starter.is_alive()
    starter.join(timeout=START_S)  # a start that waited for the lock goes on once it is released
    assert finished_while_held, f"a {mechanism} sandbox start waited for the {lock} lock held by another thread"
    assert [done.returncode for done in results] == [0]


# --- nothing forks and then runs Python --------------------------------------------------------------------

def fork_hazards(source: str) -> list[int]:
    """Lines that pass `preexec_fn` or call `fork`/`forkpty` (as code: comments and strings do not count)."""
    return [t.start[0] for t in tokenize.generate_tokens(io.StringIO(source).readline)
            if t.type == tokenize.NAME and t.string in ("preexec_fn", "fork", "forkpty")]


def test_the_scan_finds_a_hazard_in_code_and_not_in_words() -> None:
    source = ('"""Why not preexec_fn: os.fork() in a threaded process."""\n'
              "import os, subprocess  # preexec_fn would run Python after fork\n"
              "subprocess.Popen(['true'], preexec_fn=lambda: None)\n"
              "pid = os.fork()\n"
              "from os import forkpty\n")
    assert fork_hazards(source) == [3, 4, 5]


def test_no_preexec_fn_or_fork_in_the_judge_or_the_service() -> None:
    files = sorted([*(REPO / "sandbox").rglob("*.py"), *(REPO / "service").rglob("*.py")])
    assert len(files) > 20  # the scan reads the real tree
    found = [f"{path.relative_to(REPO)}:{line}" for path in files for line in fork_hazards(path.read_text())]
    assert found == [], f"Python would run between fork and exec of a multi-threaded process: {found}"


# --- the trusted baseline process dies with its worker ----------------------------------------------------

MEASURE = ["--task", "kl_div", "--device", "cpu", "--shape", "2048,2048", "--names", "eager,compile"]
"""A measurement that takes tens of seconds here (torch.compile), so dying early is the death signal's doing."""


def test_baseline_measurement_dies_with_the_thread_that_started_it(tmp_path: Path) -> None:
    """PR_SET_PDEATHSIG fires when the thread that started the measurement exits (a worker's does when the
    worker dies). The thread leaves once `-X importtime` reports the `sandbox` package imported, which the
    child does only after asking for the signal: it must then be killed by SIGKILL, not finish."""
    command = [sys.executable, "-X", "importtime", "-c", baseline._WATCHED_MAIN, str(os.getpid()), *MEASURE,
               "--out", str(tmp_path / "baseline.json")]
    started: list[subprocess.Popen] = []

    def start_and_leave() -> None:
        child = subprocess.Popen(command, cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        started.append(child)
        for line in child.stderr:
            if line.rsplit("|", 1)[-1].strip() == "sandbox":
                return  # past the preamble: this thread's exit is now the parent's death

    starter = threading.Thread(target=start_and_leave)
    starter.start()
    starter.join(timeout=120)
    assert started and not starter.is_alive(), "the measurement never imported the sandbox package"
    (child,) = started
    try:
        assert child.wait(timeout=60) == -9, child.stderr.read()[-2000:]
    finally:
        child.kill()
        child.wait()
        child.stderr.close()
    assert not (tmp_path / "baseline.json").exists()


def test_baseline_measurement_refuses_a_parent_already_gone(tmp_path: Path) -> None:
    """A worker that died before the child asked for the signal leaves it with another parent (here: a parent
    pid that is not ours): it exits before importing anything of the judge."""
    done = subprocess.run([sys.executable, "-c", baseline._WATCHED_MAIN, "1", *MEASURE,
                           "--out", str(tmp_path / "baseline.json")], cwd=REPO, capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 1 and "had already exited" in done.stderr, done.stderr
    assert not (tmp_path / "baseline.json").exists()
