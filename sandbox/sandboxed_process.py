"""A sandboxed process (sandbox/isolation.py describes the sandbox and its threat model): started through a trusted
launcher that joins the job's cgroup and sets its rlimits, its output captured up to a limit, its wall time watched,
its process tree killed at the end (`start`, `run`).
"""

from __future__ import annotations

import io
import json
import os
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from typing import Callable


from sandbox.cgroup import Cgroup
from sandbox.isolation import FLOOD_FACTOR, IsolationError, SandboxSpec, _argv, available_mechanism

_SIGNAL_NUMBERS = {int(s) for s in signal.Signals}
_UNSHARE_SIGKILLED = "unshare: sigprocmask unblock failed: Invalid argument"


_LAUNCHER = """\
import json, os, resource, sys
report, setup, argv = int(sys.argv[1]), json.loads(sys.argv[2]), sys.argv[3:]
try:
    for procs in setup["cgroup_procs"]:
        with open(procs, "w") as f:
            f.write(str(os.getpid()))
    for name, value in setup["rlimits"].items():
        resource.setrlimit(getattr(resource, name), (value, value))
    os.set_inheritable(report, False)
    os.execvp(argv[0], argv)
except BaseException as exc:
    os.write(report, f"{type(exc).__name__}: {exc}".encode())
    os._exit(127)
"""
"""Run as `python -I -S -c _LAUNCHER REPORT_FD SETUP_JSON ARGV...` in the process that becomes the sandbox:
joins the job's cgroups, sets soft = hard rlimits, closes the report pipe by exec'ing ARGV (the PATH
searched is `spec.env`'s, as Popen's). Trusted code in a fresh interpreter with one thread: -I -S keep
the candidate's PYTHON* variables and site-packages out of it."""


class _Capture:
    """Reads a pipe to its end, keeping the first `keep` bytes and counting the rest."""

    def __init__(self, stream: io.BufferedReader, keep: int, on_flood: Callable[[], None]) -> None:
        self.data = bytearray()
        self.total = 0
        self._keep = keep
        self._on_flood = on_flood
        self.thread = threading.Thread(target=self._run, args=(stream,), daemon=True)
        self.thread.start()

    def _run(self, stream: io.BufferedReader) -> None:
        flooded = False
        while chunk := stream.read1(1 << 16):
            self.total += len(chunk)
            room = self._keep - len(self.data)
            if room > 0:
                self.data += chunk[:room]
            if not flooded and self.total > FLOOD_FACTOR * self._keep:
                flooded = True
                self._on_flood()
        stream.close()


class SandboxedProcess:
    """A running sandboxed command, like Popen. `returncode < 0` means killed by that signal."""

    def __init__(self, spec: SandboxSpec, mechanism: str) -> None:
        self.mechanism = mechanism
        self.spec = spec
        self.timed_out = False
        self.flooded = False
        self._oom_at_cleanup: bool | None = None
        self._limit_at_cleanup: bool | None = None
        self._killed = threading.Event()
        self.cgroup = Cgroup.create(spec.limits.memory_bytes, spec.limits.max_pids)
        if self.cgroup:
            self.memory_mechanism = self.pids_mechanism = f"cgroup-v{self.cgroup.version}"
        else:
            self.memory_mechanism = "none (gpu job)" if spec.gpu else "rlimit-as"
            self.pids_mechanism = "rlimit-nproc" if os.getuid() != 0 else "none"
        try:
            self._popen = self._launch(_argv(spec, mechanism))
        except IsolationError:
            if self.cgroup:
                self.cgroup.remove()
            raise
        self.pid = self._popen.pid
        keep = max(spec.limits.output_bytes // 2, 1024)
        self._out = _Capture(self._popen.stdout, keep, self._flood)
        self._err = _Capture(self._popen.stderr, keep, self._flood)
        self._deadline = time.monotonic() + spec.limits.wall_s
        self._watchdog = threading.Thread(target=self._watch, daemon=True)
        self._watchdog.start()

    def _launch(self, argv: list[str]) -> subprocess.Popen:
        """Start `argv` through the launcher (see the module docstring); return once it has exec'd `argv`.

        Raises `IsolationError` if the launcher could not join the cgroup, set a limit or exec.
        """
        limits = self.spec.limits
        rlimits = {"RLIMIT_FSIZE": limits.file_size_bytes, "RLIMIT_CORE": 0}
        if not self.cgroup:
            if not self.spec.gpu:
                rlimits["RLIMIT_AS"] = limits.memory_bytes
            rlimits["RLIMIT_NPROC"] = limits.max_pids
        setup = {"cgroup_procs": [str(p) for p in self.cgroup.procs_files()] if self.cgroup else [],
                 "rlimits": rlimits}
        cwd = str(self.spec.writable_dir) if self.mechanism != "bwrap" else "/"
        pipe: list[int] = []
        try:
            pipe += os.pipe()
            popen = subprocess.Popen(
                [sys.executable, "-I", "-S", "-c", _LAUNCHER, str(pipe[1]), json.dumps(setup), *argv],
                env=self.spec.env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                pass_fds=(*self.spec.pass_fds, pipe[1]), start_new_session=True, cwd=cwd,
            )
            os.close(pipe.pop())  # the launcher holds the only write end now
            with open(pipe[0], "rb", closefd=False) as report:
                failure = report.read()  # end of file: the launcher exec'd argv (or died)
        except (OSError, subprocess.SubprocessError) as exc:
            raise IsolationError(f"could not start {argv[0]}: {exc}") from exc
        finally:
            for fd in pipe:
                os.close(fd)
        if failure:
            popen.communicate()  # the launcher exits right after reporting: reap it, close its pipes
            raise IsolationError(f"could not start {argv[0]}: {failure.decode(errors='replace')}")
        return popen

    def restart_clock(self, wall_s: float) -> None:
        """Let the wall-time limit run `wall_s` from now: a pre-started child's (sandbox/execution/warm.py) limit runs
        from
        the moment it is handed a candidate, not from its start. The watchdog reads the deadline every 0.5 s."""
        self._deadline = time.monotonic() + wall_s

    def _flood(self) -> None:
        self.flooded = True
        self.kill_tree()

    def _watch(self) -> None:
        while not self._killed.is_set():
            remaining = self._deadline - time.monotonic()
            if remaining <= 0:
                if self._popen.poll() is None:
                    self.timed_out = True
                    self.kill_tree()
                return
            if self._killed.wait(min(remaining, 0.5)) or self._popen.poll() is not None:
                return

    @property
    def returncode(self) -> int | None:
        rc = self._popen.returncode
        if self.mechanism == "bwrap" and rc is not None and 128 < rc < 160 and rc - 128 in _SIGNAL_NUMBERS:
            return -(rc - 128)  # bwrap reports a child killed by signal N as exit status 128 + N
        if rc == 1 and self.mechanism == "unshare" and self.stderr.rstrip().endswith(_UNSHARE_SIGKILLED):
            return -signal.SIGKILL  # unshare re-raises the child's fatal signal, but fails to for SIGKILL
        return rc

    @property
    def oom_killed(self) -> bool:
        """The memory cgroup killed a process of this job (False where there is no cgroup to ask)."""
        if self._oom_at_cleanup is not None:
            return self._oom_at_cleanup
        return bool(self.cgroup and self.cgroup.oom_killed())

    @property
    def memory_limit_reached(self) -> bool:
        """The tree's memory reached the job's own limit (False where there is no cgroup to ask)."""
        if self._limit_at_cleanup is not None:
            return self._limit_at_cleanup
        return bool(self.cgroup and self.cgroup.limit_reached())

    def memory_bytes(self) -> int | None:
        """The tree's memory use now, from its cgroup; None without one (RLIMIT_AS then fails allocations
        at the limit, so a runaway allocation ends in MemoryError rather than in a slow climb)."""
        return self.cgroup.memory_usage() if self.cgroup else None

    def poll(self) -> int | None:
        self._popen.poll()
        return self.returncode

    def wait(self, timeout: float | None = None) -> int | None:
        """The return code, or None if still running after `timeout` seconds.

        When the command itself has exited the job is over: whatever it left behind is killed (under bwrap
        and unshare the namespace already took it; under "none" only the cgroup can), so that the
        output pipes close and the capture is complete.
        """
        try:
            self._popen.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            return None
        self.kill_tree()
        self._out.thread.join(timeout=5)
        self._err.thread.join(timeout=5)
        return self.returncode

    def kill_tree(self) -> None:
        """Kill everything: the session, the namespace (via bwrap/unshare and its init) and the cgroup."""
        self._killed.set()
        try:
            os.killpg(self._popen.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        if self.cgroup:
            self.cgroup.kill_all()

    def cleanup(self) -> None:
        """Kill the tree, reap it, remove the cgroup. Call once the job is over (run() does)."""
        self.kill_tree()
        self._popen.wait()
        self._out.thread.join(timeout=5)
        self._err.thread.join(timeout=5)
        if self.cgroup and self._oom_at_cleanup is None:
            self._oom_at_cleanup = self.cgroup.oom_killed()
            self._limit_at_cleanup = self.cgroup.limit_reached()
            self.cgroup.remove()

    @property
    def stdout(self) -> str:
        return self._out.data.decode(errors="replace")

    @property
    def stderr(self) -> str:
        return self._err.data.decode(errors="replace")

    stdout_text = stdout
    stderr_text = stderr

    @property
    def output_truncated_bytes(self) -> int:
        return max(0, self._out.total - len(self._out.data)) + max(0, self._err.total - len(self._err.data))

    def output_text(self) -> str:
        text = self.stdout + ("\n" if self.stdout and self.stderr else "") + self.stderr
        if self.output_truncated_bytes:
            text += f"\n[{self.output_truncated_bytes} more bytes of output dropped]"
        return text


def start(spec: SandboxSpec, mechanism: str = "auto") -> SandboxedProcess:
    spec.writable_dir.mkdir(parents=True, exist_ok=True)
    return SandboxedProcess(spec, available_mechanism(mechanism))


@dataclass(frozen=True, kw_only=True)
class Completed:
    returncode: int | None
    """Negative: killed by that signal."""
    stdout: str
    stderr: str
    timed_out: bool
    oom_killed: bool
    flooded: bool
    output_truncated_bytes: int
    duration_s: float
    mechanism: str
    memory_mechanism: str
    pids_mechanism: str

    @property
    def signal(self) -> int | None:
        return -self.returncode if self.returncode is not None and self.returncode < 0 else None


def run(spec: SandboxSpec, mechanism: str = "auto") -> Completed:
    """Start, wait within the wall limit, kill whatever is left of the tree, report."""
    started = time.monotonic()
    proc = start(spec, mechanism)
    try:
        proc.wait()
    finally:
        proc.cleanup()
    return Completed(returncode=proc.returncode, stdout=proc.stdout, stderr=proc.stderr, timed_out=proc.timed_out,
                     oom_killed=proc.oom_killed, flooded=proc.flooded,
                     output_truncated_bytes=proc.output_truncated_bytes, duration_s=time.monotonic() - started,
                     mechanism=proc.mechanism,
                     memory_mechanism=proc.memory_mechanism, pids_mechanism=proc.pids_mechanism)
