"""CPU time of a process tree, from the kernel's own accounting: what the parent trusts about the child's work.

The kernel counts, per thread, the nanoseconds it actually ran (`/proc/<pid>/task/<tid>/schedstat`, first
field). Time spent waiting for a CPU is not in it, so unlike a wall clock it does not grow when the host is
saturated, and nothing in the sandbox can write it. The parent reads it for the whole sandbox tree (bwrap,
the child, every thread and every process they started) just before and just after a timed call.

Only threads alive at the second reading count: a thread that ran and exited between the two readings
takes its time with it (an undercount, so the bound it feeds is weaker, never wrongly stricter).
"""

from __future__ import annotations

import os


def _read(path: str) -> str:
    try:
        with open(path, encoding="ascii") as fh:
            return fh.read()
    except OSError:
        return ""  # the task exited between listing and reading


def tree_ns(root_pid: int) -> int:
    """Nanoseconds run by every thread of `root_pid` and of all its descendants, now."""
    total = 0
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
        for tid in tids:
            fields = _read(f"/proc/{pid}/task/{tid}/schedstat").split()
            if fields:
                total += int(fields[0])
            pending.extend(int(c) for c in _read(f"/proc/{pid}/task/{tid}/children").split())
    return total


def available(pid: int) -> bool:
    """Whether this kernel exposes per-thread run time (CONFIG_SCHED_INFO)."""
    return bool(_read(f"/proc/{pid}/schedstat").strip())
