"""CPU time of a sandboxed job, from the kernel's own accounting: what the parent trusts about the child's work.

The parent reads it just before and just after each timed round trip (`go`, sandbox/execution/phases.py); the rule it
feeds is in sandbox/execution/plausibility.py. Nothing in the sandbox can write these counters, and none of them counts
time spent waiting for a CPU, so unlike a wall clock they do not grow when the host is saturated.

Two sources, the first that works (`Meter.source` says which, and the verdict records it as
`details.timing.cpu_time_source`):

- "cgroup-v2" / "cgroup-v1": the job's own cgroup (sandbox/isolation.py, `Cgroup.cpu_usage_ns`): `cpu.stat`
  usage_usec on v2 (always there, no controller to enable) or `cpuacct.usage` on v1 (ns; the cpuacct hierarchy
  gets a cgroup of its own per job, as memory and pids do). The kernel charges it with every nanosecond any task
  of the job ran and keeps what exited tasks ran: work in a thread joined before `go` replies, in a process
  started and reaped inside the call, or in an orphan that left the process tree is all counted. The 2-core CI
  machine (as root) gets v1, the H100 hosts v2 (docs/results/timing-bounds-h100-2026-11-26.json).
- "process-clocks", where no cgroup could be made: the process-wide CPU clock of every process of the tree,
  `clock_gettime` on `MAKE_PROCESS_CPUCLOCK(pid, CPUCLOCK_SCHED)`, which the kernel keeps for a process's live
  threads plus the ones that exited. Any uid may read any process's clock (checked: root reading a child, and
  uid 65534 reading a process of its own and one of root's). What it misses: a process that exited between the
  two readings takes its time with it (reaped, that time moves to its parent's `cutime`, which no process clock
  includes), and so does a process that left the tree (an orphan re-parented outside it; under bubblewrap every
  orphan stays inside, below the namespace's init).

What both replace: the sum of `/proc/<pid>/task/<tid>/schedstat` over the threads alive at the reading. A thread
that did the call's work and was joined before the reading took that work with it, and what remained of the
floor was the harness's own work (`tests/corpus/hostile/cpu/c13_dead_thread_work.py` hid its work that way).

When the charge lands: the kernel adds a running task's time to these counters at its scheduler ticks and when
it stops running, not when they are read. Reading another process's clock does not bring it up to date (its
thread clocks, which would, are refused to other processes: EINVAL), so a task still on a CPU at a reading has up
to one tick (1/HZ: 4 ms at HZ=250, the CI machine's) of its time outside them. An honest child is blocked on its
command pipe within microseconds of replying; a child that answers from inside the call (a forged reply) could
still be computing. So each reading first waits, at most SETTLE_S, until no thread of the tree is running.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from sandbox.proctree import read, tree

if TYPE_CHECKING:
    from sandbox.cgroup import Cgroup

PROCESS_CLOCKS = "process-clocks"
SETTLE_S = 0.01
"""How long a reading waits for the job's threads to stop running before it reads anyway: one scheduler tick at
HZ=100, the coarsest setting in use, so a thread that keeps running through the wait has been charged at a tick
during it. Measured on the 2-core CI machine (HZ=250, idle), 200 round trips a series, with no wait: a server that
burns 0.3 ms and blocks after replying was charged 0.308 ms (quartiles 0.307-0.309); one that burns 0.3 ms,
replies and spins on for 2 ms was charged a median 0 ms in two series of four (the reply woke the reader on the
other CPU, and nothing charged the server before its next tick), 0.31 ms in the others. A loaded machine hides
the gap (the woken reader shares the writer's CPU and charges it), which is why the wait stays."""
SETTLE_POLL_S = 0.0002


class CpuTimeUnavailable(RuntimeError):
    """The job's cgroup stopped answering between two readings: the judge's own measurement failed."""


def process_clock_id(pid: int) -> int:
    """Linux's MAKE_PROCESS_CPUCLOCK(pid, CPUCLOCK_SCHED): a process's CPU time, its exited threads' included."""
    return ((~pid) << 3) | 2


@dataclass(frozen=True, kw_only=True)
class Reading:
    """One reading of a job's CPU time."""

    source: str
    total_ns: int
    processes: dict[int, int] = field(default_factory=dict)
    """Per process (process clocks only): a process born between two readings counts whole, one gone is lost."""
    settled: bool = True
    """Whether every thread of the tree had stopped running when it was read (False: SETTLE_S ran out)."""

    def since(self, before: Reading) -> int:
        """Nanoseconds the job ran between `before` and this reading."""
        if before.source != self.source:
            raise ValueError(f"readings from two sources: {before.source}, {self.source}")
        if self.source != PROCESS_CLOCKS:
            return self.total_ns - before.total_ns
        return sum(ns - before.processes.get(pid, 0) for pid, ns in self.processes.items())


class Meter:
    """Reads a sandboxed job's CPU time from the best source it has (module doc)."""

    def __init__(self, root_pid: int, cgroup: Cgroup | None) -> None:
        self.root_pid = root_pid
        self.cgroup = cgroup if cgroup is not None and cgroup.cpu_usage_ns() is not None else None
        self.source = f"cgroup-v{self.cgroup.version}" if self.cgroup is not None else PROCESS_CLOCKS

    def read(self) -> Reading:
        settled = self.settle()
        if self.cgroup is not None:
            ns = self.cgroup.cpu_usage_ns()
            if ns is None:
                raise CpuTimeUnavailable(f"the job's cgroup no longer reports its CPU time ({self.source})")
            return Reading(source=self.source, total_ns=ns, settled=settled)
        clocks = {}
        for pid in tree(self.root_pid)[0]:
            try:
                clocks[pid] = time.clock_gettime_ns(process_clock_id(pid))
            except OSError:
                pass  # exited since it was listed
        return Reading(source=PROCESS_CLOCKS, total_ns=sum(clocks.values()), processes=clocks, settled=settled)

    def settle(self) -> bool:
        """Wait until no thread of the tree is on a CPU (its time charged), at most SETTLE_S; whether it came."""
        deadline = time.monotonic() + SETTLE_S
        while any(_running(pid, tid) for pid, tid in tree(self.root_pid)[1]):
            if time.monotonic() >= deadline:
                return False
            time.sleep(SETTLE_POLL_S)
        return True


def _running(pid: int, tid: str) -> bool:
    """Whether the thread is running or waiting for a CPU (state R): only then can it hold uncharged time."""
    stat = read(f"/proc/{pid}/task/{tid}/stat")
    return stat[stat.rfind(")") + 2:stat.rfind(")") + 3] == "R"
