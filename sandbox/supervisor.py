"""The parent side of the trust boundary: start the isolated child and talk to it with deadlines.

Trusted code. It never imports candidate code and never unpickles what the child sends (see
`protocol`). A child that dies, hangs, floods or lies ends as a typed `ChildFailure`, never as an
exception that takes the judge down.
"""

from __future__ import annotations

import enum
import os
import re
import signal
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from typing_extensions import Self

import reference
from sandbox import isolation, protocol, sandboxed_process
from sandbox.shared import languages
from sandbox.config import JudgeConfig

SANDBOX_DIR = Path(__file__).parent
"""The judge's package directory (this module's), bound read-only into every child."""

BUILD_MOUNT = "/build"
CODE_MOUNT = "/judge"
SOURCE_MOUNT = "/source/candidate.py"
"""Where a bubblewrap child finds the judged source when it is given one (`ChildSession`'s `source`): a
judge-owned file bound read-only, so nothing the candidate runs (at build time or since) can change the
module a later child imports."""
MEMORY_RUNAWAY_BYTES = 1 << 30
"""A call that times out after its tree grew by this much memory was exhausting memory, not computing.
Why not wait for the memory limit: where the host pages memory in slowly (seen on the CI machine: ~200
MB/s under load, issue 11) a runaway allocation needs minutes to reach the default 16 GiB and the call
times out first. No honest call grows host memory by 1 GiB: inputs live on the device (GPU) or are a
few MiB (CPU sizes), and the CUDA context is created before any candidate call."""
PROFILER_NOISE = re.compile(r"^[A-Z]+:\d{4}-\d\d-\d\d \d\d:\d\d:\d\d \d+:\d+ [\w.]+\.cpp:\d+\] ")
"""torch's profiler (kineto) log lines, e.g. `USDT:2026-11-23 12:44:43 2:2 SyncActivityProfilerHandler.cpp:52]
profiler_start`: the judge's run-time operator tripwires start it, so without this filter they end every
diagnosis in place of the candidate's own last output."""


class ChildFailureKind(enum.StrEnum):
    """How a child stopped answering (stored as `details["failure"]`)."""

    CRASH = "crash"
    TIMEOUT = "timeout"
    EXITED = "exited"
    PROTOCOL = "protocol"
    OOM = "oom"


class ChildFailure(Exception):
    """The child stopped answering: it crashed, timed out, exited early or broke the protocol."""

    def __init__(self, kind: ChildFailureKind, message: str, *, returncode: int | None = None,
                 signal_name: str | None = None, stderr: str = "", oom: bool = False, flooded: bool = False) -> None:
        super().__init__(message)
        self.kind = kind
        self.returncode = returncode
        self.signal_name = signal_name
        self.stderr = stderr
        self.oom = oom
        self.flooded = flooded
        """Killed for writing more than the output limit (`isolation.FLOOD_FACTOR`); `stderr` holds its start."""


@dataclass(frozen=True)
class ChildPaths:
    """Where the child finds its build directory and the judge's code.

    Under bubblewrap these are fixed mount points (the host paths stay hidden); the weaker mechanisms
    share the host's filesystem, so the child uses the host paths themselves.
    """

    build: str
    code: str

    @classmethod
    def for_mechanism(cls, mechanism: str, work_dir: Path) -> "ChildPaths":
        if mechanism == "bwrap":
            return cls(BUILD_MOUNT, CODE_MOUNT)
        return cls(str(work_dir), str(SANDBOX_DIR.resolve().parent))


def child_path() -> str:
    """The child's PATH: this interpreter's directory, CUDA's tools, the system's; never the host's own PATH."""
    path_dirs = [os.path.dirname(sys.executable), "/usr/local/cuda/bin", "/usr/local/bin", "/usr/bin", "/bin"]
    return ":".join(dict.fromkeys(path_dirs))


def child_env(config: JudgeConfig, paths: ChildPaths, extra: dict[str, str] | None = None) -> dict[str, str]:
    """The child's whole environment: nothing of the host's (no DATABASE_URL, keys, tokens, CXX) leaks in."""
    env = {
        "PATH": child_path(),
        "HOME": paths.build,
        "TMPDIR": "/tmp",
        "LANG": "C.UTF-8",
        "PYTHONPATH": os.pathsep.join([paths.code, *isolation.extra_python_path()]),
        "PYTHONDONTWRITEBYTECODE": "1",
        "PYTHONNOUSERSITE": "1",
        "PYTHONUNBUFFERED": "1",
        "TORCH_EXTENSIONS_DIR": f"{paths.build}/ext",
        "MAX_JOBS": str(config.compile_jobs),
        "JUDGE_CHILD_THREADS": str(config.child_threads),
        **languages.child_env(paths.build),  # the JIT languages' caches, in the build directory
    }
    for name in ("CUDA_VISIBLE_DEVICES", "CUDA_HOME", "TORCH_CUDA_ARCH_LIST", "CUDA_MODULE_LOADING",
                 "JUDGE_TIMING_LEAD_MS"):  # the last: sandbox/child/timing.py LEAD_MS, overridden to measure it
        if name in os.environ:
            env[name] = os.environ[name]
    env.update(extra or {})
    env.update(languages.jit_env(env.get("TORCH_CUDA_ARCH_LIST") or languages.arch_list()))
    return env


def code_binds() -> dict[Path, str]:
    """The judge's own packages, read-only, at /judge: all the child may import of ours."""
    return {
        SANDBOX_DIR: f"{CODE_MOUNT}/sandbox",
        Path(reference.__file__).parent: f"{CODE_MOUNT}/reference",
    }


@dataclass(kw_only=True)
class ChildResult:
    header: dict[str, Any]
    payloads: list[bytes]


class ChildSession:
    """One isolated child process and its command/result pipes.

    `pre_started`: a spare (sandbox/execution/warm.py) that answers `Started` once its interpreter and torch are up,
    then
    waits for `Begin`, which names the task, before it touches the device; `task_id` is then None.
    `context_at_start`: such a spare creates its device context before `Started` (no kernel of its own yet).
    `source`: the judge-owned file holding the checked source (sandbox/compile.KeyPaths.source), bound read-only
    at SOURCE_MOUNT and imported from there; without it the child imports `candidate.py` in its build
    directory, which is as writable as the rest of that directory.
    """

    def __init__(self, mode: str, task_id: reference.TaskId | None, device: str, work_dir: Path, config: JudgeConfig,
                 *, gpu: bool, extra_env: dict[str, str] | None = None, wall_s: float,
                 pre_started: bool = False, context_at_start: bool = False,
                 extra_binds: dict[Path, str] | None = None, source: Path | None = None) -> None:
        self.mechanism = isolation.available_mechanism(config.isolation)
        paths = ChildPaths.for_mechanism(self.mechanism, work_dir)
        extra_binds = dict(extra_binds or {})
        if source is None:
            source_arg = f"{paths.build}/candidate.py"
        elif self.mechanism == "bwrap":
            extra_binds[source] = source_arg = SOURCE_MOUNT
        else:
            source_arg = str(source)  # the weaker mechanisms share the host's files (sandbox/isolation.py)
        cmd_r, self._cmd_w = os.pipe()
        self._res_r, res_w = os.pipe()
        argv = [sys.executable, "-B", "-m", "sandbox.child", mode, "--task", task_id or "", "--device", device,
                "--source", source_arg, "--cmd-fd", str(cmd_r), "--res-fd", str(res_w)]
        if pre_started:
            argv.append("--pre-started")
            if context_at_start:
                argv.append("--context-at-start")
        spec = isolation.SandboxSpec(
            argv=argv,
            env=child_env(config, paths, {"JUDGE_PRIVATE_PIDS": "1" if self.mechanism != "none" else "0",
                                          "JUDGE_TRACE": "1" if config.traces(gpu) else "0",
                                          **(extra_env or {})}),
            writable_dir=work_dir,
            readonly_binds={**code_binds(), **extra_binds},  # extra: e.g. the build accelerators, the source
            gpu=gpu,
            limits=isolation.Limits(
                wall_s=wall_s,
                memory_bytes=config.memory_limit_bytes,
                max_pids=config.max_pids,
                output_bytes=config.output_limit_bytes,
                tmp_bytes=config.disk_limit_bytes,
                file_size_bytes=config.disk_limit_bytes,
            ),
            pass_fds=(cmd_r, res_w),
            cwd=paths.build,
        )
        self.started = time.monotonic()
        self.on_close: Callable[[], None] | None = None
        """Called once the child is closed (sandbox/execution/warm.py learns that a handed-out child's candidate
        ended)."""
        self._closed = False
        try:
            self.process = sandboxed_process.start(spec, mechanism=self.mechanism)
        finally:
            os.close(cmd_r)
            os.close(res_w)

    def send(self, header: dict[str, Any]) -> None:
        try:
            protocol.send_header(self._cmd_w, header)
        except (BrokenPipeError, OSError):
            raise self._failure("the child closed its command pipe") from None

    def receive(self, timeout_s: float, limit: int = 64 << 20) -> ChildResult:
        memory_before = self.process.memory_bytes()
        try:
            header, payloads = protocol.receive(self._res_r, deadline=time.monotonic() + timeout_s, limit=limit)
        except protocol.ChannelTimeout:
            runaway = self._memory_runaway(memory_before)
            self.kill()
            if runaway:
                raise ChildFailure(ChildFailureKind.OOM, f"no answer within {timeout_s:.0f} s while {runaway}",
                                   stderr=self.stderr(),
                                   oom=True) from None
            raise ChildFailure(ChildFailureKind.TIMEOUT, f"no answer within {timeout_s:.0f} s",
                               stderr=self.stderr()) from None
        except protocol.ChannelClosed:
            raise self._failure("the child exited without answering") from None
        except protocol.ProtocolError as exc:
            self.kill()
            raise ChildFailure(ChildFailureKind.PROTOCOL, f"the child broke the result protocol: {exc}",
                               stderr=self.stderr()) from None
        return ChildResult(header=header, payloads=payloads)

    def request(self, header: dict[str, Any], timeout_s: float) -> ChildResult:
        self.send(header)
        return self.receive(timeout_s)

    def _failure(self, message: str) -> ChildFailure:
        completed = self.process.wait(timeout=10)
        if completed is None:
            self.kill()
            completed = self.process.wait(timeout=10)
        rc = self.process.returncode
        oom = self.process.oom_killed
        if self.process.flooded:
            return ChildFailure(ChildFailureKind.CRASH, f"{message}: killed for flooding its output "
                                f"({self.process.output_truncated_bytes} bytes past the limit)", returncode=rc,
                                stderr=self.stderr(), flooded=True)
        if self.process.timed_out:
            return ChildFailure(ChildFailureKind.TIMEOUT, f"{message}: the sandbox's wall-time limit killed it",
                                returncode=rc,
                                stderr=self.stderr())
        if rc is not None and rc < 0:
            name = signal.Signals(-rc).name if -rc in signal.Signals._value2member_map_ else f"signal {-rc}"
            kind = ChildFailureKind.OOM if oom else ChildFailureKind.CRASH
            return ChildFailure(kind, f"{message}: killed by {name}", returncode=rc, signal_name=name,
                                stderr=self.stderr(), oom=oom)
        return ChildFailure(ChildFailureKind.EXITED, f"{message} (exit code {rc})", returncode=rc, stderr=self.stderr(),
                            oom=oom)

    def _memory_runaway(self, before: int | None) -> str | None:
        """How the tree's memory grew during a call that timed out, if that looks like exhaustion."""
        now = self.process.memory_bytes()
        if before is None or now is None or now - before < MEMORY_RUNAWAY_BYTES:
            return None
        limit = self.process.spec.limits.memory_bytes
        return (f"its host memory grew by {(now - before) / 2**30:.1f} GiB to {now / 2**30:.1f} GiB (limit "
                f"{limit / 2**30:.0f} GiB): it was exhausting memory")

    def stderr(self) -> str:
        """The child's output without torch profiler log lines (see PROFILER_NOISE)."""
        text = self.process.output_text()
        return "\n".join(line for line in text.splitlines() if not PROFILER_NOISE.match(line))

    def kill(self) -> None:
        self.process.kill_tree()

    def close(self, timeout_s: float = 10.0) -> None:
        """Ask the child to exit, then kill its tree and close the pipes. Idempotent: a second call does nothing
        (closing the pipes' numbers twice could close files opened since under the same numbers)."""
        if self._closed:
            return
        self._closed = True
        try:
            protocol.send_header(self._cmd_w, {"op": "exit"})
        except OSError:
            pass
        self.process.wait(timeout=timeout_s)
        self.process.cleanup()
        for fd in (self._cmd_w, self._res_r):
            try:
                os.close(fd)
            except OSError:
                pass
        if self.on_close is not None:
            self.on_close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
