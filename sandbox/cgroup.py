"""A job's cgroup (v2, or v1's memory, pids and cpuacct controllers): the memory and process limits of a sandbox, its
CPU time, its processes, and the kill of all of them (sandbox/isolation.py says why the limits are there).
"""

from __future__ import annotations

import os
import signal
import time
import uuid
from pathlib import Path


_CGROUP_ROOT = Path("/sys/fs/cgroup")


def _make_v1(controller: str, name: str) -> Path:
    """A new v1 cgroup `name` for `controller`: below ours (charged to us), else at the hierarchy's root."""
    path = _own_cgroup_v1(controller) / name
    try:
        path.mkdir()
    except OSError:
        path = _CGROUP_ROOT / controller / name
        path.mkdir()
    return path


def _own_cgroup_v1(controller: str) -> Path:
    """Where this process sits in a v1 hierarchy, so a job's cgroup nests under (and is charged to) ours."""
    for line in Path("/proc/self/cgroup").read_text().splitlines():
        _, controllers, path = line.split(":", 2)
        if controller in controllers.split(","):
            return _CGROUP_ROOT / controller / path.lstrip("/")
    return _CGROUP_ROOT / controller


class Cgroup:
    """A per-job cgroup with memory and pids limits, on cgroup v2 or v1; `create` is None where not writable.

    It also accounts the job's CPU time (`cpu_usage_ns`, read by sandbox/execution/cputime.py): v2 keeps it in every
    cgroup; on v1 the cpuacct hierarchy gets a cgroup of its own, where one can be made (without it the job
    still runs, and its CPU time is read from its processes' clocks)."""

    def __init__(self, paths: dict[str, Path], version: int) -> None:
        self.paths = paths
        self.version = version

    @classmethod
    def create(cls, memory_bytes: int, max_pids: int) -> "Cgroup | None":
        name = f"kernel-judge-{uuid.uuid4().hex[:12]}"
        made: list[Path] = []
        try:
            if (_CGROUP_ROOT / "cgroup.controllers").exists():  # v2 (unified)
                # Sibling of the services, under the root (exempt from the no-internal-processes rule).
                parent = _CGROUP_ROOT / "kernel-judge"
                parent.mkdir(exist_ok=True)
                for p in (_CGROUP_ROOT, parent):
                    try:
                        (p / "cgroup.subtree_control").write_text("+memory +pids")
                    except OSError:
                        pass  # already enabled, or not ours to enable: checked below
                path = parent / name
                path.mkdir()
                made.append(path)
                (path / "memory.max").write_text(str(memory_bytes))
                if (path / "memory.swap.max").exists():
                    (path / "memory.swap.max").write_text("0")
                (path / "pids.max").write_text(str(max_pids))
                return cls({"memory": path, "pids": path, "cpu": path}, 2)
            paths = {}
            for controller in ("memory", "pids"):
                paths[controller] = _make_v1(controller, name)
                made.append(paths[controller])
            (paths["memory"] / "memory.limit_in_bytes").write_text(str(memory_bytes))
            swap = paths["memory"] / "memory.memsw.limit_in_bytes"
            if swap.exists():
                swap.write_text(str(memory_bytes))  # memory + swap: no escaping the limit into swap
            (paths["pids"] / "pids.max").write_text(str(max_pids))
            try:
                paths["cpu"] = _make_v1("cpuacct", name)
                made.append(paths["cpu"])
            except OSError:
                pass  # no cpuacct hierarchy here: CPU time comes from the processes' clocks
            return cls(paths, 1)
        except OSError:
            for path in made:
                try:
                    path.rmdir()
                except OSError:
                    pass
            return None

    def cpu_usage_ns(self) -> int | None:
        """Nanoseconds of CPU every task of the job has run since it began, exited tasks included (v2: `cpu.stat`
        usage_usec; v1: `cpuacct.usage`); None where the job has no CPU accounting or it cannot be read."""
        path = self.paths.get("cpu")
        try:
            if path is None:
                return None
            if self.version == 2:
                stat = dict(line.split() for line in (path / "cpu.stat").read_text().splitlines())
                return int(stat["usage_usec"]) * 1000
            return int((path / "cpuacct.usage").read_text())
        except (OSError, ValueError, KeyError):
            return None

    def procs_files(self) -> list[Path]:
        return sorted({p / "cgroup.procs" for p in self.paths.values()})

    def pids(self) -> set[int]:
        found: set[int] = set()
        for f in self.procs_files():
            try:
                found |= {int(x) for x in f.read_text().split()}
            except (OSError, ValueError):
                pass
        return found

    def _memory_counts(self, name: str) -> dict[str, int]:
        """A memory controller file of "key value" lines (memory.events, memory.oom_control), read as numbers."""
        text = (self.paths["memory"] / name).read_text()
        return {key: int(value) for key, value in (line.split() for line in text.splitlines())}

    def oom_killed(self) -> bool:
        try:
            if self.version == 2:
                return self._memory_counts("memory.events").get("oom_kill", 0) > 0
            control = self._memory_counts("memory.oom_control")
        except (OSError, ValueError):
            return False
        if "oom_kill" in control:
            return control["oom_kill"] > 0
        return self.limit_reached()  # a v1 kernel without the kill counter: the limit reached is the nearest sign

    def limit_reached(self) -> bool:
        """The job's memory reached its own limit (cgroup v2 `memory.events` "oom", v1 `memory.failcnt`): what an
        OOM kill inside it then was is the job's doing, not the host's (sandbox/build/blame.py)."""
        try:
            if self.version == 2:
                return self._memory_counts("memory.events").get("oom", 0) > 0
            return int((self.paths["memory"] / "memory.failcnt").read_text()) > 0
        except (OSError, ValueError):
            return False

    def memory_usage(self) -> int | None:
        """Bytes of memory the job's processes hold now (page cache of their files included)."""
        mem = self.paths["memory"]
        try:
            return int((mem / ("memory.current" if self.version == 2 else "memory.usage_in_bytes")).read_text())
        except (OSError, ValueError):
            return None

    def kill_all(self) -> None:
        """SIGKILL every process in the cgroup until it is empty (cgroup.kill where the kernel has it)."""
        kill_file = self.paths["pids"] / "cgroup.kill"
        for _ in range(500):
            pids = self.pids()
            if not pids:
                return
            if self.version == 2 and kill_file.exists():
                try:
                    kill_file.write_text("1")
                except OSError:
                    pass
            for pid in pids:
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            time.sleep(0.01)  # the kernel removes killed tasks asynchronously; poll until the cgroup is empty

    def remove(self) -> None:
        self.kill_all()
        for p in self.paths.values():
            for _ in range(100):
                try:
                    p.rmdir()
                    break
                except FileNotFoundError:
                    break
                except OSError:
                    time.sleep(0.01)  # a just-killed task may still be listed for a moment
