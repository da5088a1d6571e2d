"""Tie a worker's life to the process that started it (`kernel-judge serve` sets JUDGE_PARENT_PID).

Two mechanisms, because either alone can miss: `PR_SET_PDEATHSIG` makes the kernel send SIGTERM the
moment the parent dies (Linux only; it would fire on the death of the parent *thread* that forked us,
which for `serve` is its main thread), and `orphaned()` compares getppid() with the expected parent on
every loop, which also covers a parent that died before the prctl call.
"""

from __future__ import annotations

import ctypes
import logging
import os
import signal

log = logging.getLogger(__name__)

PR_SET_PDEATHSIG = 1  # <linux/prctl.h>
PARENT_ENV = "JUDGE_PARENT_PID"


def die_with_parent(sig: int = signal.SIGTERM) -> bool:
    """Ask the kernel to send `sig` to this process when its parent dies. False where unsupported."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return libc.prctl(PR_SET_PDEATHSIG, int(sig), 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


def expected_parent() -> int | None:
    value = os.environ.get(PARENT_ENV, "").strip()
    return int(value) if value.isdigit() else None


def orphaned(parent: int | None) -> bool:
    """True when a parent was expected and is no longer ours (it died; we were re-parented)."""
    return parent is not None and os.getppid() != parent


def parent_of(pid: int) -> int | None:
    """The parent of a process on this host (from /proc), or None when it is gone or /proc is not there."""
    try:
        stat = open(f"/proc/{pid}/stat").read()
    except OSError:
        return None
    fields = stat[stat.rfind(")") + 2:].split()  # the command name may hold spaces and parentheses
    return int(fields[1]) if len(fields) > 1 else None
