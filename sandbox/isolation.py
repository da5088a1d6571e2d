"""Run an untrusted command so that it cannot reach anything it should not, and always ends.

DANGER. The command run here imports LLM-written code. That code may compile and load native
extensions (torch.utils.cpp_extension.load_inline -> ninja -> g++/nvcc), so it runs arbitrary machine
code with every system call the kernel allows. Assume it is hostile: it will try to read the service's
secrets and other submissions, talk to the database on 127.0.0.1, patch the judge, leave a process
behind, fill the disk, exhaust memory or PIDs, or flood us with output. This module is the machine-level
half of the trust boundary; the protocol half (what the child may say) is in `supervisor` and `child`.

TRUSTED: this module, the caller (the judge), the kernel, bubblewrap/unshare, and everything we start
before `exec` of the caller's argv (the launcher, sandboxed_process.py's `_LAUNCHER`). UNTRUSTED: every process
of the argv and its descendants, everything it writes (stdout, stderr, the build dir, the pass_fds pipes).

This module is the sandbox's spec and how it is made (bubblewrap's or unshare's command line); the process is
sandbox/sandboxed_process.py (`start`, `run`: the launcher, the output captured, the wall time watched, the kill),
the job's cgroup sandbox/cgroup.py.

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
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

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
