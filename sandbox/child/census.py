"""What runs in the execution child besides the harness, counted at every reply: its Python and native threads, and
the other processes in its sandbox.
"""

from __future__ import annotations

import os
import sys




def python_threads() -> int:
    return len(sys._current_frames())


def native_threads() -> int:
    return len(os.listdir("/proc/self/task"))


def other_processes() -> list[str]:
    """Processes besides us and our ancestors: all of them in a private PID namespace (bwrap, unshare),
    our descendants only where the host's processes are visible (the development-only "none")."""
    own = {os.getpid(), os.getppid(), 1}
    private = os.environ.get("JUDGE_PRIVATE_PIDS") == "1"
    parents: dict[int, int] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat", "rb") as fh:
                    parents[int(entry)] = int(fh.read().rsplit(b")", 1)[1].split()[1])
            except (OSError, ValueError, IndexError):
                continue

    def descends_from_us(pid: int) -> bool:
        for _ in range(64):
            pid = parents.get(pid, 0)
            if pid == os.getpid():
                return True
            if pid <= 1:
                return False
        return False

    found = []
    for pid in parents:
        if pid in own or not (private or descends_from_us(pid)):
            continue
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as fh:
                found.append(fh.read().replace(b"\0", b" ").decode(errors="replace")[:200] or f"pid {pid}")
        except OSError:
            continue
    return found
