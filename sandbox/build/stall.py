"""Whether a build child that ran out of time had that time: the host's stall told from the candidate's slowness.

A compile limit measures wall time, but a child stopped (SIGSTOP, a frozen cgroup, a debugger) or starved of CPU
on a loaded host spends that wall time doing nothing of the candidate's. `StallWatch` samples the child's process
tree while the parent waits for its answer and sorts each interval between two samples:

- the host's, when a process of the tree is stopped (state T or t), or when one is runnable (R) while the tree
  ran for next to none of the interval (`STARVED_CPU_SHARE`): it wanted the CPU and did not get it;
- the candidate's otherwise: it computed (a template bomb keeps its compiler busy), or every process slept
  (a candidate that sleeps at import chose to).

When the limit fires, `StallReport.stalled` says whether the host took a large part of the wall time
(`HOST_SHARE`): that build is the host's stall, retried like any failure of the judge's, never the candidate's
`timeout` and never stored. The tree's CPU time comes from the job's cgroup, which counts exited compilers too;
without one, from the live processes' own and reaped children's times in /proc.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from sandbox.proctree import tree

if TYPE_CHECKING:
    from sandbox.sandboxed_process import SandboxedProcess

SAMPLE_S = 0.2
"""Between two looks at the tree: short against any compile limit, cheap (a few /proc reads)."""
HOST_SHARE = 0.25
"""Of the wall time, the share the host must have taken for a timed-out build to be its stall: a quarter of the
limit lost is far beyond sampling error, and a candidate slow on its own gets its `timeout` on an idle host."""
STARVED_CPU_SHARE = 0.1
"""A runnable tree that ran less than this share of an interval (of one CPU) got next to none: the host's. A tree
that got more was slowed by a loaded host but computed: charged, since its limit outlasts a build's CPU many times
over (a 2-core host at load 8-9 gives one busy process about a quarter of a CPU, a quarter of each interval)."""
_TICK_S = 1.0 / os.sysconf("SC_CLK_TCK")


@dataclass(frozen=True)
class StallReport:
    wall_s: float
    cpu_s: float
    stopped_s: float
    starved_s: float

    @property
    def host_s(self) -> float:
        return self.stopped_s + self.starved_s

    @property
    def stalled(self) -> bool:
        """Whether the host, not the candidate, took the time: a retry of the judge's, not a verdict."""
        return self.wall_s > 0 and self.host_s >= HOST_SHARE * self.wall_s

    def describe(self) -> str:
        return (f"of {self.wall_s:.1f} s the build child was stopped {self.stopped_s:.1f} s and waited for a CPU "
                f"{self.starved_s:.1f} s (it ran {self.cpu_s:.1f} s of CPU)")

    def to_dict(self) -> dict[str, float]:
        return {"wall_s": round(self.wall_s, 2), "cpu_s": round(self.cpu_s, 2),
                "stopped_s": round(self.stopped_s, 2), "starved_s": round(self.starved_s, 2)}


def _stat(pid: int) -> tuple[str, int, float] | None:
    """(state, parent pid, CPU seconds of it and its reaped children) of one process, or None once it is gone."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = text[text.rindex(")") + 2:].split()  # the command name may hold spaces and parentheses
    ticks = sum(int(f) for f in fields[11:15])  # utime stime cutime cstime
    return fields[0], int(fields[1]), ticks * _TICK_S


def _tree(root: int) -> dict[int, tuple[str, int, float]]:
    """The root and its descendants (sandbox/proctree.py), each with its `_stat`."""
    return {pid: stat for pid in tree(root)[0] if (stat := _stat(pid)) is not None}


class StallWatch:
    """Samples a sandboxed process's tree (sandbox/isolation.py `SandboxedProcess`) on a thread until `stop`."""

    def __init__(self, process: SandboxedProcess, clock: Callable[[], float] = time.monotonic) -> None:
        self._process = process
        self._clock = clock
        self._stop = threading.Event()
        self._started = clock()
        self._cpu_s = self._stopped_s = self._starved_s = 0.0
        self._last_cpu_s: float | None = None
        self._thread = threading.Thread(target=self._run, name="build-stall-watch", daemon=True)
        self._thread.start()

    def _sample(self) -> tuple[set[str], float | None]:
        """The states of the tree's processes, and the tree's CPU seconds so far."""
        cgroup = self._process.cgroup
        if cgroup is not None:
            states = {s[0] for s in filter(None, (_stat(pid) for pid in cgroup.pids()))}
            used = cgroup.cpu_usage_ns()
            if used is not None:
                return states, used / 1e9
        tree = _tree(self._process.pid)
        return {s for s, _, _ in tree.values()}, sum(cpu for _, _, cpu in tree.values()) if tree else None

    def _run(self) -> None:
        before = self._clock()
        while not self._stop.wait(SAMPLE_S):
            states, cpu_s = self._sample()
            now = self._clock()
            interval, before = now - before, now
            if cpu_s is None or self._last_cpu_s is None:  # no measure of this interval's running yet
                self._last_cpu_s = cpu_s
                continue
            ran, self._last_cpu_s = max(cpu_s - self._last_cpu_s, 0.0), cpu_s
            self._cpu_s = max(self._cpu_s, cpu_s)
            if states & {"T", "t"}:
                self._stopped_s += interval
            elif "R" in states and ran < STARVED_CPU_SHARE * interval:
                self._starved_s += interval

    def stop(self) -> StallReport:
        """End the sampling; what it saw from the start to now."""
        self._stop.set()
        self._thread.join(timeout=5)
        return StallReport(wall_s=self._clock() - self._started, cpu_s=self._cpu_s, stopped_s=self._stopped_s,
                           starved_s=self._starved_s)
