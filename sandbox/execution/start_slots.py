"""Host-wide start slots: how many pre-started children (sandbox/execution/warm.py) may be in their CPU-only start
at once on this host, across every worker process on it.

A spare's CPU-only start (bubblewrap, the interpreter, `import torch` and the judge's modules, up to the child's
`Started`) is ~3 s of one core on an H100 host. Every worker fills its pools when it begins and again after a run of
short candidates; where the spares of all a host's workers (many GPUs, large pools) outnumber its idle cores, the
starts slow one another, the builds and the candidates' parent work beside them. A slot is held from the spawn to
`Started`; a start that finds none free waits, so that starts beyond the cap come as slots free up. The cap does
not make starts faster where cores are idle (JudgeConfig.spare_start_slots says how it is sized).

Across processes: slot `i` is an `flock` on `<directory>/slot-<i>.lock`. The kernel releases a lock when its
process dies, so a killed worker never leaks a slot, and locks taken through separate opens exclude each other
within one process too. Processes configured with different slot counts share the lower numbers: the host's
cap is then the largest count, and the smaller process never gets more than its own. A waiter is woken at once
by a release in its own process; a release in another process is seen within `POLL_S`.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

POLL_S = 0.05
"""How often a waiter retries the slots when the one it waits for may be freed by another process: a start is
~3 s, so this adds at most ~2% to one."""


class SlotWaitAborted(Exception):
    """The waiter's `abort` said stop (its pool is closing)."""


class HostStartSlots:
    """`count` slots shared by every process that uses the same `directory` (module docstring)."""

    def __init__(self, directory: Path, count: int) -> None:
        self.directory = directory
        self.count = max(1, count)
        self._cond = threading.Condition()
        self.directory.mkdir(parents=True, exist_ok=True)

    def _try(self) -> int | None:
        """An open, locked slot file, or None when every slot is taken."""
        for i in range(self.count):
            fd = os.open(self.directory / f"slot-{i}.lock", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                os.close(fd)
                continue
            return fd
        return None

    @contextlib.contextmanager
    def hold(self, abort: Callable[[], bool] = lambda: False) -> Iterator[float]:
        """Wait for a free slot (raises `SlotWaitAborted` once `abort()` is true), hold it for the block; yields
        the seconds waited."""
        asked = time.monotonic()
        with self._cond:
            while (fd := self._try()) is None:
                if abort():
                    raise SlotWaitAborted
                self._cond.wait(POLL_S)
        try:
            yield time.monotonic() - asked
        finally:
            os.close(fd)  # closing the only descriptor of that open releases its flock
            with self._cond:
                self._cond.notify_all()

    def wake(self) -> None:
        """Wake every waiter of this process now (so that one whose `abort` became true sees it)."""
        with self._cond:
            self._cond.notify_all()


def default_count(cpus: int | None = None) -> int:
    """Half the host's CPUs, at least one (JudgeConfig.spare_start_slots says why)."""
    return max(1, (cpus if cpus is not None else os.cpu_count() or 1) // 2)
