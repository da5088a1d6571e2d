"""Tie a worker's life to the process that started it (`kernel-judge serve` sets JUDGE_PARENT_PID).

Two mechanisms, because either alone can miss: `PR_SET_PDEATHSIG` makes the kernel send SIGTERM the
moment the parent dies (Linux only; it fires on the death of the parent *thread* that forked us, and again at
each hand-over between a dying parent's threads: `dying`), and `orphaned()` compares getppid() with the
expected parent on every loop, which also covers a parent that died before the prctl call.
"""

from __future__ import annotations

import ctypes
import logging
import os
import signal
import time

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


DEATH_SETTLE_S = 2.0
"""How long a stop signal that comes while the expected parent still looks alive may take to prove to be a notice
of its death (`dying`). Re-parenting to init follows the parent's last thread within milliseconds; 2 s covers a
loaded host. An operator's second signal is acted on after this wait."""


def dying(parent: int | None) -> bool:
    """True when the expected parent is gone, or is gone within `DEATH_SETTLE_S`.

    Why wait: PR_SET_PDEATHSIG fires when the parent *thread* exits, and a dying multi-threaded parent (`serve`,
    SIGKILLed) hands this process from thread to thread of its own before the last one hands it to init. Each
    hand-over sends the signal again, while getppid() still names the parent, so a second notice of one death can
    arrive before `orphaned` is true (seen in tests/service/test_drills.py: two notices in the same millisecond,
    and a worker that then abandoned the job it was finishing)."""
    if parent is None:
        return False
    deadline = time.monotonic() + DEATH_SETTLE_S
    while not orphaned(parent):
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.01)
    return True


def parent_of(pid: int) -> int | None:
    """The parent of a process on this host (from /proc), or None when it is gone or /proc is not there."""
    try:
        stat = open(f"/proc/{pid}/stat").read()
    except OSError:
        return None
    fields = stat[stat.rfind(")") + 2:].split()  # the command name may hold spaces and parentheses
    return int(fields[1]) if len(fields) > 1 else None
