"""Background work niced across the kernel's autogroups (sandbox/scheduling.py): a compiler the judge starts in a
session of its own from a niced thread has its session's autogroup niced too, so that it yields the CPU to
candidates' builds and timings in their own sessions."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from pathlib import Path

from sandbox import scheduling
from sandbox.build import pch_compilers

AUTOGROUPS = Path("/proc/sys/kernel/sched_autogroup_enabled")


def _autogroup_nice(pid: int) -> int | None:
    try:
        return int(Path(f"/proc/{pid}/autogroup").read_text().split("nice")[-1])
    except OSError:
        return None


def _sleeper_from(nice: int) -> subprocess.Popen:
    """`start_compiler` of a process that waits on its stdin, called from a thread of niceness `nice`."""
    started: list[subprocess.Popen] = []

    def start() -> None:
        os.setpriority(os.PRIO_PROCESS, 0, nice)
        started.append(pch_compilers.start_compiler([sys.executable, "-c", "import sys; sys.stdin.read()"],
                                                    stdin=subprocess.PIPE))

    thread = threading.Thread(target=start)
    thread.start()
    thread.join()
    return started[0]


def test_a_compiler_started_from_a_niced_thread_has_its_session_niced_as_much() -> None:
    autogroups = AUTOGROUPS.exists() and AUTOGROUPS.read_text().strip() == "1"
    niced, plain = _sleeper_from(19), _sleeper_from(0)
    try:
        assert os.getsid(niced.pid) == niced.pid and os.getsid(plain.pid) == plain.pid  # sessions of their own
        if autogroups:
            assert _autogroup_nice(niced.pid) == 19 and _autogroup_nice(plain.pid) == 0
            assert os.getpriority(os.PRIO_PROCESS, niced.pid) == 19
        else:  # nothing to nice but the processes themselves
            assert not scheduling.nice_session(niced.pid, 19)
    finally:
        for proc in (niced, plain):
            proc.kill()
            proc.wait()


def test_a_session_is_never_raised_in_priority_and_a_gone_process_is_no_error() -> None:
    proc = _sleeper_from(19)
    try:
        scheduling.nice_session(proc.pid, 5)  # lower than it is: left at 19
        assert _autogroup_nice(proc.pid) in (19, None)
    finally:
        proc.kill()
        proc.wait()
    assert not scheduling.nice_session(proc.pid, 19)
