"""Run an untrusted command so that it cannot reach anything it should not, and always ends.

DANGER. The command run here imports LLM-written code. That code may compile and load native
extensions (torch.utils.cpp_extension.load_inline -> ninja -> g++/nvcc), so it runs arbitrary machine
code with every system call the kernel allows. Assume it is hostile: it will try to read the service's
secrets and other submissions, talk to the database on 127.0.0.1, patch the judge, leave a process
behind, fill the disk, exhaust memory or PIDs, or flood us with output. This module is the machine-level
half of the trust boundary; the protocol half (what the child may say) is in `supervisor` and `child`.

TRUSTED: this module, the caller (the judge), the kernel, bubblewrap/unshare, and everything we start
before `exec` of the caller's argv (the launcher, `_LAUNCHER`). UNTRUSTED: every process of the argv and
its descendants, everything it writes (stdout, stderr, the build dir, the pass_fds pipes).

How a sandbox starts: no Python runs between fork and exec in the judge. The judge is multi-threaded
(compile pool, output readers, watchdogs), and a pre-exec callback given to `subprocess.Popen` makes CPython take the
import lock and run the `os.register_at_fork` handlers (logging's takes logging's module lock) around the
fork, then run Python in the child: a thread holding either lock stalls every sandbox start (a worker
deadlocked for minutes that way). So no pre-exec callback is used anywhere; `Popen` only forks and execs,
in C, and what must happen before the untrusted argv runs is done by a launcher in the same process:
a fresh, single-threaded interpreter (`python -I -S -c _LAUNCHER`) that joins the job's cgroup, sets
the rlimits, and execs the mechanism's argv (bwrap, unshare, or the command). It reports a failure
before exec over a close-on-exec pipe, as subprocess does for exec failures; the parent reads that
pipe to its end (end of file = exec happened) and raises `IsolationError` (a system_error, never the
candidate's verdict). Why not `sh -c '...; exec prlimit ...'`: a shell can only report a failed
cgroup join through an exit status the candidate could also exit with, and `prlimit` (util-linux) or
the shell's `ulimit` (flags and units differ between dash and bash) is one more thing a host must have
right; the interpreter running the judge is always there. The cost is one interpreter start-up
(~10 ms) per sandbox. The launcher execs in place, so `pid` is bwrap's (unshare's, the command's) and
the exit status is theirs: it adds no process level. Cgroup membership and rlimits are inherited by
everything the mechanism starts.

Which mechanism runs: bubblewrap, or nothing. `available_mechanism("auto")` (the default) and
`available_mechanism("bwrap")` both mean bubblewrap and raise `IsolationUnavailable`, with how to install
it, where it does not work; the judge then gives a `system_error` verdict (never blamed on the
candidate) and the service refuses to start (`require_isolation`). The weaker mechanisms run only when
asked for by name (JUDGE_ISOLATION=unshare or none, for development): a host without bubblewrap never
degrades silently. Every verdict records the mechanism that ran (`Environment.isolation`), so the
leaderboard can refuse to rank anything judged under less than bwrap.

What each mechanism guarantees:

- "bwrap" (bubblewrap; preferred; path from $JUDGE_BWRAP or PATH). New network namespace (only a
  down-by-default loopback of its own: 127.0.0.1 is not the host's, so PostgreSQL and the API are out of
  reach), new PID namespace with its own /proc (the host's /proc/1/environ is not there), new IPC, UTS,
  cgroup and user namespaces (user namespaces disabled for the child's descendants where bwrap supports
  it), all capabilities dropped, a new session (no TIOCSTI into our terminal). Filesystem: an empty root
  with, read-only, /usr (and the /bin, /lib* links or dirs), a short allow-list of /etc (`_ETC_FILES`:
  no shadow, no machine secrets), the Python installation (sys.base_prefix resolved, sys.prefix, the
  site dirs on sys.path: packages only, never the checkout an editable install points at), the CUDA
  toolkit and driver libraries, and the caller's explicit `readonly_binds`. Writable: only
  `writable_dir` at /build and private tmpfs /tmp and /dev/shm of `tmp_bytes` each; the rest of the
  skeleton bwrap builds (/, /dev) is remounted read-only. Not visible: /root, /home, /work,
  /etc/shadow, the service's data dir, other builds. With gpu=True, /dev/nvidia* (and /sys read-only,
  which the driver reads) are added. The tree dies with the namespace's init, and bwrap dies with us
  (--die-with-parent; note: PDEATHSIG fires when the *thread* that started it exits, so start sandboxes
  from a thread that outlives them).
  Known residual risk: run as root, bwrap maps uid 0 inside its user namespace to host root, so file
  permission checks treat the child as root. Everything bound is read-only and all capabilities are
  gone, and /proc/sys is re-bound read-only (without that, the child could write host sysctls such as
  kernel.core_pattern, which runs a program as host root: tested). What remains exposed is the kernel
  itself. Running bwrap as an unprivileged uid would close this, but it then cannot bind a Python that
  lives under /root (as on the dev box), so it is not done here.
- "unshare" (util-linux). New network, PID (fresh /proc), mount, IPC and UTS namespaces, killed with
  unshare (--kill-child). It does NOT hide or protect the filesystem: the child sees and, as root, may
  write every host file, `readonly_binds` and /build are not mounted, and the cwd is the host path of
  `writable_dir`. The command is PID 1 of its namespace (it ignores signals sent from inside). unshare
  re-raises its child's fatal signal but cannot for SIGKILL (it prints "sigprocmask unblock failed" and
  exits 1): we map that back to -9. Use it only where bwrap cannot run, for code you would run as
  yourself anyway.
- "none". No namespaces at all: only the limits below and a process group. Development only. Every
  verdict records the mechanism that produced it, so nothing judged under "none" can pass as isolated.

Whatever the mechanism:

- wall time enforced from outside (a watchdog thread kills the tree and sets `timed_out`);
- memory: a per-job cgroup (v2, or v1 as here) with memory and swap limits; where no cgroup can be
  created, RLIMIT_AS for CPU-only jobs, and nothing for GPU jobs (CUDA reserves terabytes of virtual
  address space, so RLIMIT_AS would break every honest kernel). `memory_mechanism` says which ran;
- CPU time: the same cgroup accounts every task the job ever ran (v2 `cpu.stat`; v1 a cpuacct cgroup of its
  own), which the timing bound reads (sandbox/execution/cputime.py); without one, the processes' clocks are read;
- processes: cgroup pids.max. Without a cgroup we set RLIMIT_NPROC, but the kernel does not apply it to
  processes whose real uid is host root, and bwrap maps any uid inside its user namespace back to the
  invoking uid (we checked: `--unshare-user --uid 65534` under root still forks past the limit). Running
  bwrap itself as an unprivileged uid would make it apply but cannot read a Python under /root. So as
  root without cgroups there is no process-count limit: `pids_mechanism` reports "none";
- RLIMIT_FSIZE (a single file, e.g. in /build, cannot exceed `file_size_bytes`), no core dumps. The
  total written to /build is NOT bounded by this module (many files each under the limit): put the
  build root on a size-limited filesystem or quota if that matters;
- the environment is exactly `spec.env` (bwrap adds PWD, the cwd): nothing of ours (DATABASE_URL, API
  keys) is inherited;
- stdout and stderr are read by threads: the first `output_bytes` are kept, the rest only counted, and
  past FLOOD_FACTOR x that the tree is killed (`flooded`);
- at the end every process is killed: the session, the namespace (via its init) and the cgroup.

A command killed by signal N is reported as returncode -N (as in subprocess). bwrap reports a child's
death by signal N as exit status 128 + N, which we map back; a child that *exits* with 129..159 is
indistinguishable from that and is reported as signalled too.
"""

from __future__ import annotations

import functools
import glob
import io
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

MECHANISMS = ("bwrap", "unshare", "none")
"""Strongest first. "auto" means "bwrap"; the others run only when named (a development opt-in)."""
RANKED_MECHANISMS = frozenset({"bwrap"})
"""Verdicts judged under these may be ranked; "unshare" leaves the host's files readable, "none" everything."""
INSTALL_HINT = ("Install bubblewrap (Debian/Ubuntu: `apt-get install bubblewrap`; Fedora/RHEL: `dnf install "
                "bubblewrap`; Arch: `pacman -S bubblewrap`), or set JUDGE_BWRAP to a bwrap binary that works "
                "here (on a host without a package manager, Debian's .deb unpacks with `dpkg -x`). For "
                "development only, JUDGE_ISOLATION=unshare (no filesystem isolation: candidates can read host "
                "files) or JUDGE_ISOLATION=none (no isolation at all) judges without it; such verdicts record "
                "the weaker mechanism and are not ranked.")
FLOOD_FACTOR = 16
"""Output past FLOOD_FACTOR x the kept bytes is a flood: the tree is killed instead of read forever."""
BUILD_MOUNT = "/build"

_ETC_FILES = ("ld.so.cache", "ld.so.conf", "ld.so.conf.d", "alternatives", "passwd", "group", "nsswitch.conf",
              "localtime", "hosts")
"""All of /etc the child sees: enough for the dynamic linker, the compilers (alternatives) and getpwuid."""


class IsolationError(RuntimeError):
    """The sandbox itself could not be set up (not the candidate's fault)."""


class IsolationUnavailable(IsolationError):
    """bubblewrap is required (no explicit opt-in to a weaker mechanism) and does not work on this host.

    The message says why and how to install it (`INSTALL_HINT`).
    """


@dataclass(frozen=True)
class Limits:
    wall_s: float
    memory_bytes: int
    max_pids: int
    output_bytes: int
    """Kept of stdout and stderr together (half each); the rest is counted."""
    tmp_bytes: int
    """Size of the private /tmp and of /dev/shm (bwrap only)."""
    file_size_bytes: int


@dataclass(frozen=True)
class SandboxSpec:
    argv: list[str]
    env: dict[str, str]
    """The child's whole environment."""
    writable_dir: Path
    """Bound read-write at /build (the only writable place besides the private /tmp)."""
    readonly_binds: dict[Path, str] = field(default_factory=dict)
    """Host path -> path inside, read-only (bwrap only)."""
    gpu: bool = False
    limits: Limits = Limits(60, 4 << 30, 256, 1 << 20, 1 << 30, 1 << 30)
    pass_fds: tuple[int, ...] = ()
    """File descriptors inherited at the same numbers (the command/result pipes)."""
    cwd: str = BUILD_MOUNT


# --- cgroups -----------------------------------------------------------------------------------------

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

    def oom_killed(self) -> bool:
        mem = self.paths["memory"]
        try:
            if self.version == 2:
                events = dict(line.split() for line in (mem / "memory.events").read_text().splitlines())
                return int(events.get("oom_kill", 0)) > 0
            control = dict(line.split() for line in (mem / "memory.oom_control").read_text().splitlines())
            if "oom_kill" in control:
                return int(control["oom_kill"]) > 0
            return int((mem / "memory.failcnt").read_text()) > 0
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


# --- mechanisms ----------------------------------------------------------------------------------------

def bwrap_path() -> str | None:
    return os.environ.get("JUDGE_BWRAP") or shutil.which("bwrap")


def extra_python_path() -> list[str]:
    """Directories from the host's PYTHONPATH (packages installed with --target, say): bound and kept."""
    code_root = str(Path(__file__).resolve().parent.parent)
    return [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep)
            if p and Path(p).is_dir() and str(Path(p).resolve()) != code_root]


def python_roots() -> list[Path]:
    """The Python installation the child needs: base prefix (resolved), venv prefix, site-packages dirs.

    Never the checkout: an editable install's .pth points there, but the judge's code reaches the child
    only through the caller's read-only binds.
    """
    roots = {Path(sys.base_prefix).resolve(), Path(sys.prefix), Path(sys.executable).resolve().parent.parent}
    for entry in sys.path + extra_python_path():
        if entry.rstrip("/").endswith(("site-packages", "dist-packages")) or entry in extra_python_path():
            roots.add(Path(entry))
    roots = {r for r in roots if r.is_dir() and str(r) not in ("/", "/usr") and not str(r).startswith("/usr/")}
    # Drop roots inside other roots: one bind covers them.
    return sorted(r for r in roots if not any(o != r and r.is_relative_to(o) for o in roots))


def _bwrap_userns_args() -> tuple[str, ...]:
    return _userns_args(bwrap_path())


@functools.cache
def _userns_args(path: str | None) -> tuple[str, ...]:
    """User-namespace flags: a user namespace the child cannot nest further, if this bwrap and kernel allow."""
    if not path:
        return ()
    strict = ("--unshare-user", "--disable-userns")
    try:
        probe = subprocess.run([path, *strict, "--ro-bind", "/", "/", "true"], capture_output=True, timeout=30)
        if probe.returncode == 0:
            return strict
    except (OSError, subprocess.SubprocessError):
        pass
    return ()


def _bwrap_argv(spec: SandboxSpec) -> list[str]:
    argv = [bwrap_path() or "bwrap", "--die-with-parent", "--new-session", "--unshare-all", *_bwrap_userns_args(),
            "--cap-drop", "ALL", "--hostname", "sandbox",
            # uid 0 inside maps to host root, so DAC would let it write root-owned sysctls (core_pattern!).
            "--proc", "/proc", "--ro-bind", "/proc/sys", "/proc/sys", "--dev", "/dev",
            "--size", str(spec.limits.tmp_bytes), "--tmpfs", "/tmp",
            "--size", str(spec.limits.tmp_bytes), "--tmpfs", "/dev/shm"]
    for top in ("usr", "bin", "sbin", "lib", "lib32", "lib64", "libx32"):
        host = Path("/") / top
        if host.is_symlink():
            argv += ["--symlink", os.readlink(host), f"/{top}"]
        elif host.is_dir():
            argv += ["--ro-bind", str(host), f"/{top}"]
    for name in _ETC_FILES:
        argv += ["--ro-bind-try", f"/etc/{name}", f"/etc/{name}"]
    for root in python_roots():
        argv += ["--ro-bind", str(root), str(root)]
    # CUDA toolkits and driver libraries outside /usr (which is bound whole, /usr/local/cuda* included).
    for extra in ("/opt/nvidia", "/opt/cuda", *sorted(glob.glob("/opt/cuda-*"))):
        if Path(extra).is_dir():
            argv += ["--ro-bind", extra, extra]
    for host, inside in spec.readonly_binds.items():
        argv += ["--ro-bind", str(host), inside]
    argv += ["--bind", str(spec.writable_dir), BUILD_MOUNT]
    if spec.gpu:
        for node in sorted(glob.glob("/dev/nvidia*")):  # nvidia0.., nvidiactl, nvidia-uvm, nvidia-caps/
            argv += ["--dev-bind", node, node]
        argv += ["--ro-bind-try", "/sys", "/sys",
                 "--ro-bind-try", "/run/nvidia-persistenced", "/run/nvidia-persistenced"]
    # The skeleton bwrap builds (/, /dev, mount points) is a tmpfs: make it read-only once all is mounted.
    argv += ["--remount-ro", "/dev", "--remount-ro", "/", "--chdir", spec.cwd, "--"]
    return argv + list(spec.argv)


def _unshare_argv(spec: SandboxSpec) -> list[str]:
    return ["unshare", "--net", "--pid", "--fork", "--mount-proc", "--ipc", "--uts", "--kill-child", "--",
            *spec.argv]


_SIGNAL_NUMBERS = {int(s) for s in signal.Signals}
_UNSHARE_SIGKILLED = "unshare: sigprocmask unblock failed: Invalid argument"


def _argv(spec: SandboxSpec, mechanism: str) -> list[str]:
    if mechanism == "bwrap":
        return _bwrap_argv(spec)
    if mechanism == "unshare":
        return _unshare_argv(spec)
    return list(spec.argv)


def _works(mechanism: str) -> bool:
    """Does `true` run under this mechanism here? Probed once per (mechanism, bwrap binary)."""
    return _probe(mechanism, bwrap_path() if mechanism == "bwrap" else None)


@functools.cache
def _probe(mechanism: str, bwrap: str | None) -> bool:
    if mechanism == "bwrap" and not bwrap or mechanism == "unshare" and not shutil.which("unshare"):
        return False
    probe = SandboxSpec(argv=["true"], env={"PATH": "/usr/bin:/bin"}, writable_dir=Path("/tmp"), cwd="/")
    try:
        return subprocess.run(_argv(probe, mechanism), capture_output=True, timeout=30, cwd="/").returncode == 0
    except (OSError, subprocess.SubprocessError):
        return False


def _bwrap_problem() -> str:
    """Why bubblewrap does not work here, in words a person can act on."""
    configured = os.environ.get("JUDGE_BWRAP")
    if configured and not Path(configured).exists():
        return f"JUDGE_BWRAP points at {configured}, which does not exist"
    path = bwrap_path()
    if not path:
        return "bwrap is not installed (not on PATH, JUDGE_BWRAP not set)"
    probe = SandboxSpec(argv=["true"], env={"PATH": "/usr/bin:/bin"}, writable_dir=Path("/tmp"), cwd="/")
    try:
        done = subprocess.run(_argv(probe, "bwrap"), capture_output=True, text=True, timeout=30, cwd="/")
        detail = (done.stderr.strip().splitlines() or [f"exit status {done.returncode}"])[-1]
    except (OSError, subprocess.SubprocessError) as exc:
        detail = str(exc)
    return f"{path} cannot create a sandbox here ({detail}; user namespaces may be disabled)"


def available_mechanism(requested: str = "auto") -> str:
    """The mechanism to use. "auto" and "bwrap" mean bubblewrap and raise `IsolationUnavailable` where it
    does not work: nothing falls back to a weaker mechanism unless that mechanism is named."""
    if requested not in (*MECHANISMS, "auto"):
        raise IsolationError(f"unknown isolation mechanism {requested!r}; choose from {', '.join(MECHANISMS)} or auto")
    mechanism = "bwrap" if requested == "auto" else requested
    if _works(mechanism):
        return mechanism
    if mechanism == "bwrap":
        raise IsolationUnavailable(f"bubblewrap is required to isolate candidate code and does not work here: "
                                   f"{_bwrap_problem()}. {INSTALL_HINT}")
    raise IsolationError(f"isolation mechanism {requested!r} does not work on this host")


def require_isolation(requested: str = "auto") -> str:
    """Start-up check for a judging process: the mechanism judging will use, or `IsolationUnavailable`
    (`IsolationError` for a mechanism that is unknown or cannot run) with how to fix it.

    Pass the judge's configured mechanism (`JudgeConfig.isolation`, from JUDGE_ISOLATION). Call it before
    accepting work, so that a host without bubblewrap refuses to start instead of failing every job.
    """
    return available_mechanism(requested)


# --- the process -------------------------------------------------------------------------------------

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
