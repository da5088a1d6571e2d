"""Background work that really yields the CPU to candidates: niceness that holds across the kernel's autogroups.

Why: with autogrouping on (`/proc/sys/kernel/sched_autogroup_enabled`, the default of most distribution kernels),
the kernel shares the CPU fairly between sessions first, and a process's nice value counts only against the other
processes of its own session. The judge starts its background compilers in sessions of their own (so that a
timeout kills a whole process group), and a niced one there took a candidate's fair share regardless: on the 2-core
development machine a busy loop beside three nice-19 loops, each in its own session, ran 6.1 s against 3.3 s alone,
and 3.1 s once their sessions' autogroups were niced too (2026-11-29). The README's tour had its first candidate's
compile take 24.6 s beside the background headers, where main.cpp alone is ~6 s.

`/proc/<pid>/autogroup` sets a session's autogroup nice; raising it needs no privilege. Where the file is absent
(autogrouping compiled out or off) the process nice is all there is, and it already counts.
"""

from __future__ import annotations

import os
from pathlib import Path


def thread_nice() -> int:
    """The calling thread's niceness (Linux keeps one per thread; the judge's background threads raise their own)."""
    return os.getpriority(os.PRIO_PROCESS, 0)


def nice_session(pid: int, nice: int) -> bool:
    """Give the autogroup of `pid`'s session the niceness `nice` (never lower than it is); False when this kernel has
    no autogroups or `pid` is gone. Only for a process that leads a session of its own: an autogroup is a session's."""
    path = Path(f"/proc/{pid}/autogroup")
    try:
        current = int(path.read_text().split("nice")[-1])
        if nice > current:
            path.write_text(str(nice))
        return True
    except (OSError, ValueError):
        return False


def pass_on_nice(pid: int) -> None:
    """Give the session that `pid` leads the calling thread's niceness, when that thread is niced."""
    if thread_nice() > 0:
        nice_session(pid, thread_nice())
