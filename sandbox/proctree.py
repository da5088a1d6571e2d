"""A sandboxed process and its descendants, read from /proc: what the CPU-time meter (sandbox/execution/cputime.py) and
the build's stall watch (sandbox/build/stall.py) look at. Trusted; runs in the parent.

Descendants are found through each thread's `children` file, not by scanning every process of the host: the watch
and the meter look several times a second, and a host running eight builds has thousands of processes.
"""

from __future__ import annotations

import os


def read(path: str) -> str:
    """A /proc file's text, or "" when the task exited between listing and reading."""
    try:
        with open(path, encoding="ascii") as fh:
            return fh.read()
    except OSError:
        return ""


def tree(root_pid: int) -> tuple[list[int], list[tuple[int, str]]]:
    """(processes, (process, thread) pairs) of `root_pid` and all its descendants, now."""
    processes: list[int] = []
    threads: list[tuple[int, str]] = []
    pending, seen = [root_pid], set()
    while pending:
        pid = pending.pop()
        if pid in seen:
            continue
        seen.add(pid)
        try:
            tids = os.listdir(f"/proc/{pid}/task")
        except OSError:
            continue
        processes.append(pid)
        for tid in tids:
            threads.append((pid, tid))
            pending.extend(int(c) for c in read(f"/proc/{pid}/task/{tid}/children").split())
    return processes, threads
