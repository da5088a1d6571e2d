"""Escape attempts against `sandbox.isolation`, run for real: every attempt is a small Python program
started under the sandbox with this interpreter, and the host is inspected afterwards.

bwrap is what CI installs and what judging uses, so every escape test runs for it and fails (never
skips) if it cannot start. "unshare" and "none" protect less (see the module docstring): they are
tested only for what they claim, and skipped only where the mechanism cannot exist on this host.
"""

from __future__ import annotations

import json
import os
import resource
import signal
import socket
import sys
import textwrap
import uuid
from pathlib import Path

import pytest

from sandbox import cgroup, isolation, sandboxed_process
from sandbox.config import JudgeConfig
from sandbox.isolation import Limits, SandboxSpec

pytestmark = pytest.mark.slow  # every test starts real sandboxed children

ALL = ["bwrap", "unshare", "none"]
NAMESPACED = ["bwrap", "unshare"]
LIMITS = Limits(wall_s=30, memory_bytes=512 << 20, max_pids=64, output_bytes=64 << 10, tmp_bytes=8 << 20,
                file_size_bytes=4 << 20)
ENV = {"PATH": f"{os.path.dirname(sys.executable)}:/usr/local/bin:/usr/bin:/bin", "HOME": "/build",
       "LANG": "C.UTF-8", "PYTHONDONTWRITEBYTECODE": "1", "PYTHONUNBUFFERED": "1"}


def need(mechanism: str) -> str:
    """bwrap must work (CI installs it); the weaker mechanisms are skipped only where they cannot exist."""
    if mechanism == "bwrap":
        assert isolation.available_mechanism("bwrap") == "bwrap", "bubblewrap must work (apt-get install bubblewrap)"
    elif not isolation._works(mechanism):
        pytest.skip(f"{mechanism} cannot run on this host")
    return mechanism


def sandboxed(tmp_path: Path, mechanism: str, code: str, *args: str, limits: Limits = LIMITS, env: dict | None = None,
              **spec: object) -> sandboxed_process.Completed:
    build = tmp_path / "build"
    return sandboxed_process.run(SandboxSpec(argv=[sys.executable, "-c", textwrap.dedent(code), *args], env=env or ENV,
                                     writable_dir=build, limits=limits, **spec), need(mechanism))


def report(done: sandboxed_process.Completed) -> dict:
    """The child's last stdout line, as JSON."""
    assert done.returncode == 0, (done.returncode, done.stderr[-2000:])
    return json.loads(done.stdout.strip().splitlines()[-1])


def host_processes_with(marker: str) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if marker.encode() in (entry / "cmdline").read_bytes():
                    found.append(int(entry.name))
            except OSError:
                pass  # exited while we looked
    return found


@pytest.fixture
def no_cgroup(monkeypatch: pytest.MonkeyPatch) -> None:
    """Turn the cgroup layer off, to test what the namespaces or rlimits do on their own."""
    monkeypatch.setattr(cgroup.Cgroup, "create", classmethod(lambda cls, *args: None))


# --- mechanism selection -------------------------------------------------------------------------------

def test_auto_picks_bwrap_and_names_are_checked() -> None:
    assert isolation.available_mechanism("auto") == "bwrap"
    assert isolation.require_isolation("auto") == "bwrap"
    assert isolation.available_mechanism("none") == "none"
    with pytest.raises(isolation.IsolationError, match="unknown"):
        isolation.available_mechanism("docker")


@pytest.mark.parametrize("requested", ["auto", "bwrap"])
@pytest.mark.parametrize("bwrap", ["/nonexistent/bwrap", "/bin/false"], ids=["missing", "broken"])
def test_without_bubblewrap_nothing_falls_back(monkeypatch: pytest.MonkeyPatch, requested: str, bwrap: str) -> None:
    """A missing or unusable bwrap is refused, with the reason and how to install it: no silent unshare."""
    monkeypatch.setenv("JUDGE_BWRAP", bwrap)
    with pytest.raises(isolation.IsolationUnavailable) as refused:
        isolation.require_isolation(requested)
    message = str(refused.value)
    assert "apt-get install bubblewrap" in message and "JUDGE_ISOLATION=unshare" in message
    assert ("does not exist" in message) if bwrap.startswith("/nonexistent") else ("cannot create a sandbox" in message)
    with pytest.raises(isolation.IsolationUnavailable):
        sandboxed_process.start(SandboxSpec(argv=["true"], env=ENV, writable_dir=Path("/tmp/never-used")), requested)


def test_weaker_isolation_only_when_named(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("JUDGE_BWRAP", "/nonexistent/bwrap")
    assert isolation.require_isolation("none") == "none"
    if isolation._works("unshare"):
        assert isolation.require_isolation("unshare") == "unshare"
    assert isolation.RANKED_MECHANISMS == {"bwrap"}


# --- network -------------------------------------------------------------------------------------------

@pytest.mark.parametrize("mechanism", NAMESPACED)
def test_no_network_not_even_host_loopback(tmp_path: Path, mechanism: str) -> None:
    listener = socket.create_server(("127.0.0.1", 0))
    listener.setblocking(False)
    port = listener.getsockname()[1]
    done = sandboxed(tmp_path, mechanism, """
        import json, socket, sys
        out = {}
        for port in (5432, int(sys.argv[1])):
            try:
                socket.create_connection(("127.0.0.1", port), timeout=3).close()
                out[port] = "connected"
            except OSError as exc:
                out[port] = type(exc).__name__
        try:
            socket.getaddrinfo("example.com", 443)
            out["dns"] = "resolved"
        except OSError as exc:
            out["dns"] = type(exc).__name__
        print(json.dumps(out))
    """, str(port))
    out = report(done)
    assert out == {"5432": out["5432"], str(port): out[str(port)], "dns": out["dns"]}
    assert "connected" not in out.values() and out["dns"] != "resolved", out
    with pytest.raises(BlockingIOError):
        listener.accept()  # the test's own listener saw no connection
    socket.create_connection(("127.0.0.1", port), timeout=3).close()  # while the host itself can connect
    listener.close()


# --- processes -----------------------------------------------------------------------------------------

@pytest.mark.parametrize("mechanism", NAMESPACED)
def test_own_pid_namespace_and_proc(tmp_path: Path, mechanism: str) -> None:
    out = report(sandboxed(tmp_path, mechanism, """
        import json, os
        pids = [int(p) for p in os.listdir("/proc") if p.isdigit()]
        try:
            environ = open("/proc/1/environ", "rb").read().decode(errors="replace")
        except OSError as exc:
            environ = type(exc).__name__
        print(json.dumps({"pids": pids, "init": open("/proc/1/cmdline", "rb").read().decode(errors="replace"),
                          "environ": environ}))
    """))
    assert len(out["pids"]) <= 4, out["pids"]  # init, us (and for bwrap nothing else): no host processes
    host_init = Path("/proc/1/cmdline").read_bytes().decode(errors="replace")
    assert out["init"] != host_init
    try:
        host_environ = Path("/proc/1/environ").read_bytes().decode(errors="replace")
    except OSError:
        host_environ = ""
    assert not host_environ or out["environ"] != host_environ


@pytest.mark.parametrize("mechanism", ALL)
def test_detached_process_does_not_survive(tmp_path: Path, mechanism: str) -> None:
    """Double fork + setsid: the grandchild is told to outlive us; run() must kill it anyway."""
    marker = f"detached-{uuid.uuid4().hex}"  # in argv, so inherited by every fork's cmdline
    done = sandboxed(tmp_path, mechanism, """
        import os, sys, time
        ready_r, ready_w = os.pipe()
        if os.fork() == 0:
            os.setsid()
            if os.fork() == 0:
                os.write(ready_w, b"x")  # the grandchild is alive and detached
                while True:
                    with open("still-here", "a") as f:
                        f.write("x")
                    time.sleep(0.05)
            os._exit(0)
        os.read(ready_r, 1)
        print("left a detached grandchild behind")
    """, marker)
    assert done.returncode == 0 and "left a detached" in done.stdout, done.stderr
    survivors = host_processes_with(marker)
    if mechanism == "none" and not done.pids_mechanism.startswith("cgroup"):
        for pid in survivors:
            os.kill(pid, signal.SIGKILL)
        pytest.skip("without namespaces or a cgroup nothing can find a setsid'ed grandchild (documented)")
    assert survivors == []


@pytest.mark.parametrize("mechanism", NAMESPACED)
def test_namespace_alone_kills_detached_process(tmp_path: Path, mechanism: str, no_cgroup: None) -> None:
    """Without the cgroup's kill, the PID namespace's init dying must take the detached grandchild with it."""
    marker = f"ns-detached-{uuid.uuid4().hex}"
    done = sandboxed(tmp_path, mechanism, """
        import os, time
        ready_r, ready_w = os.pipe()
        if os.fork() == 0:
            os.setsid()
            if os.fork() == 0:
                os.write(ready_w, b"x")
                time.sleep(1000)
            os._exit(0)
        os.read(ready_r, 1)
    """, marker)
    # No cgroup: nothing bounds the pids but the namespace, or, for a judge that is not root (as in the image),
    # RLIMIT_NPROC; what kills the grandchild here is the namespace either way.
    assert done.returncode == 0 and done.pids_mechanism in ("none", "rlimit-nproc")
    assert host_processes_with(marker) == []


@pytest.mark.parametrize("mechanism", ALL)
def test_fork_bomb_is_bounded(tmp_path: Path, mechanism: str) -> None:
    done = sandboxed(tmp_path, mechanism, """
        import json, os
        r, w = os.pipe()
        children = 0
        error = None
        for _ in range(2000):
            try:
                pid = os.fork()
            except OSError as exc:
                error = exc.errno
                break
            if pid == 0:
                os.close(w)
                os.read(r, 1)  # blocks until the parent (the last holder of w) exits
                os._exit(0)
            children += 1
        print(json.dumps({"children": children, "errno": error}))
    """)
    if done.pids_mechanism == "none":
        pytest.skip("no pids cgroup on this host and RLIMIT_NPROC does not bind root")
    out = report(done)
    assert out["errno"] is not None and out["children"] < LIMITS.max_pids, out


# --- filesystem ----------------------------------------------------------------------------------------

def test_host_files_are_invisible(tmp_path: Path) -> None:
    secret = tmp_path / "outside" / "secret.txt"
    secret.parent.mkdir()
    secret.write_text("the service's secret")
    repo = Path(__file__).resolve().parents[2]
    candidates = [str(secret), "/etc/shadow", "/root/.bash_history", "/root/.ssh", str(repo / "pyproject.toml"),
                  str(repo / "sandbox" / "isolation.py"), "/work/shared", "/home", str(Path.home() / ".cache")]
    done = sandboxed(tmp_path, "bwrap", """
        import json, os, sys
        seen = {}
        for path in sys.argv[1:]:
            try:
                seen[path] = open(path).read()[:50] if os.path.isfile(path) else os.listdir(path)
            except OSError as exc:
                seen[path] = type(exc).__name__
        print(json.dumps({"seen": seen, "root": os.listdir("/"),
                          "slash_root": os.listdir("/root") if os.path.isdir("/root") else [],
                          "etc": sorted(os.listdir("/etc"))}))
    """, *candidates)
    out = report(done)
    for path, what in out["seen"].items():
        assert what in ("FileNotFoundError", "PermissionError"), (path, what)
    # The root holds the system dirs, /build, and the first component of each bound Python root (a
    # venv inside a checkout at /check/work/main/.venv adds /check): mount points on the way, nothing more.
    python_tops = {root.parts[1] for root in isolation.python_roots()}
    assert set(out["root"]) <= {"usr", "bin", "sbin", "lib", "lib32", "lib64", "libx32", "etc", "proc", "dev", "tmp",
                                "build", "opt"} | python_tops, (out["root"], python_tops)
    # /root is there only as a mount point on the way to a Python installed under it (pyenv).
    assert set(out["slash_root"]) <= {".pyenv"}
    assert "shadow" not in out["etc"] and "gshadow" not in out["etc"]


def test_writes_outside_build_fail(tmp_path: Path) -> None:
    outside = tmp_path / "outside-write.txt"
    site = next(p for p in sys.path if p.endswith("site-packages"))
    # The sysctls matter most: uid 0 inside is host root to DAC. core_pattern gets its own value back, so
    # even a failing test changes nothing on the host.
    targets = ["/usr/pwned", "/etc/pwned", f"{site}/pwned.pth", f"{sys.base_prefix}/pwned", "/root/pwned",
               "/pwned", "/dev/pwned", "/proc/sys/kernel/core_pattern", "/proc/sys/vm/drop_caches"]
    done = sandboxed(tmp_path, "bwrap", """
        import json, os, sys
        result = {}
        for path in sys.argv[1:]:
            try:
                same = open(path).read() if path == "/proc/sys/kernel/core_pattern" else "1"
                with open(path, "w") as f:
                    f.write(same)
                result[path] = "written"
            except OSError as exc:
                result[path] = type(exc).__name__
        # The host's tmp dir does not exist in here: creating it lands in the private /tmp, not the host's.
        os.makedirs(os.path.dirname(sys.argv[-1]), exist_ok=True)
        open(sys.argv[-1], "w").write("x")
        open("/build/allowed.txt", "w").write("ok")
        print(json.dumps(result))
    """, *targets, str(outside))
    out = report(done)
    assert all(v != "written" for v in out.values()), out
    assert not outside.exists()
    assert (tmp_path / "build" / "allowed.txt").read_text() == "ok"
    for target in targets[:4]:
        assert not Path(target).exists()


def test_disk_fill_is_bounded(tmp_path: Path) -> None:
    limits = Limits(**{**LIMITS.__dict__, "tmp_bytes": 2 << 20})  # /tmp fills before a file reaches its limit
    out = report(sandboxed(tmp_path, "bwrap", """
        import errno, json
        result = {}
        for path in ("/tmp/fill", "/build/fill"):
            written = 0
            try:
                with open(path, "wb", buffering=0) as f:
                    while written < 64 << 20:
                        written += f.write(b"x" * (1 << 20))
            except OSError as exc:
                result[path] = [errno.errorcode[exc.errno], written]
        print(json.dumps(result))
    """, limits=limits))
    assert out["/tmp/fill"][0] == "ENOSPC" and out["/tmp/fill"][1] <= limits.tmp_bytes
    assert out["/build/fill"][0] == "EFBIG"
    assert (tmp_path / "build" / "fill").stat().st_size <= LIMITS.file_size_bytes


# --- limits and reporting -------------------------------------------------------------------------------

@pytest.mark.parametrize("mechanism", ALL)
def test_output_flood_is_bounded_and_killed(tmp_path: Path, mechanism: str) -> None:
    done = sandboxed(tmp_path, mechanism, """
        import sys
        line = "flood " * 1000 + "\\n"
        while True:
            sys.stdout.write(line)
    """)
    assert done.flooded and done.returncode is not None and done.returncode < 0
    assert len(done.stdout) <= LIMITS.output_bytes // 2
    assert done.output_truncated_bytes > isolation.FLOOD_FACTOR * LIMITS.output_bytes // 2 - LIMITS.output_bytes


@pytest.mark.parametrize("mechanism", ALL)
def test_output_over_limit_is_truncated_and_counted(tmp_path: Path, mechanism: str) -> None:
    done = sandboxed(tmp_path, mechanism, "import sys; sys.stdout.write('y' * (3 * 32768)); sys.stderr.write('err')")
    assert done.returncode == 0 and not done.flooded
    assert done.stdout == "y" * (LIMITS.output_bytes // 2) and done.stderr == "err"
    assert done.output_truncated_bytes == 2 * 32768


@pytest.mark.parametrize("mechanism", ALL)
def test_memory_hog_is_stopped_and_reported(tmp_path: Path, mechanism: str) -> None:
    done = sandboxed(tmp_path, mechanism, """
        chunks = []
        try:
            for _ in range(64):  # 2 GiB at most, touched page by page
                chunks.append(bytearray(32 << 20))
            print("allocated everything")
        except MemoryError:
            print("MemoryError")
    """)
    assert "allocated everything" not in done.stdout
    assert done.memory_mechanism in ("cgroup-v1", "cgroup-v2", "rlimit-as")
    assert (done.returncode == -signal.SIGKILL and done.oom_killed) or "MemoryError" in done.stdout, done


def test_memory_falls_back_to_rlimit_as_only_without_gpu(tmp_path: Path, no_cgroup: None) -> None:
    code = """
        import json, resource
        try:
            blob = bytearray(1 << 30)
            got = "allocated"
        except MemoryError:
            got = "MemoryError"
        print(json.dumps({"as": resource.getrlimit(resource.RLIMIT_AS)[0], "got": got}))
    """
    cpu = sandboxed(tmp_path, "bwrap", code)
    assert cpu.memory_mechanism == "rlimit-as" and report(cpu) == {"as": LIMITS.memory_bytes, "got": "MemoryError"}
    gpu = sandboxed(tmp_path, "bwrap", code, gpu=True)
    assert gpu.memory_mechanism == "none (gpu job)"
    assert report(gpu) == {"as": -1, "got": "allocated"}  # CUDA needs the address space


@pytest.mark.parametrize("mechanism", ALL)
def test_infinite_loop_times_out_and_tree_is_killed(tmp_path: Path, mechanism: str) -> None:
    marker = f"spinner-{uuid.uuid4().hex}"
    limits = Limits(**{**LIMITS.__dict__, "wall_s": 2.0})
    done = sandboxed(tmp_path, mechanism, """
        import os
        if os.fork() == 0:
            os.setsid()
        while True:
            pass
    """, marker, limits=limits)
    assert done.timed_out and done.returncode is not None and done.returncode < 0
    assert 2.0 <= done.duration_s < 10
    assert host_processes_with(marker) == []


@pytest.mark.parametrize("mechanism", ALL)
def test_segfault_is_reported_as_signal_11(tmp_path: Path, mechanism: str) -> None:
    done = sandboxed(tmp_path, mechanism, "import ctypes; ctypes.string_at(0)")
    assert done.returncode == -signal.SIGSEGV and done.signal == signal.SIGSEGV
    assert not done.timed_out and not done.oom_killed
    assert not list((tmp_path / "build").glob("core*"))


@pytest.mark.parametrize("mechanism", ALL)
def test_environment_is_only_what_the_caller_passed(tmp_path: Path, mechanism: str,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DATABASE_URL", "postgresql://judge:hunter2@127.0.0.1/judge")
    monkeypatch.setenv("JUDGE_API_KEY", "sk-secret")
    out = report(sandboxed(tmp_path, mechanism, "import json, os; print(json.dumps(dict(os.environ)))",
                           env={**ENV, "CUDA_VISIBLE_DEVICES": "0"}))
    out.pop("PWD", None) if mechanism == "bwrap" and out.get("PWD") == "/build" else None  # bwrap's --chdir sets it
    assert out == {**ENV, "CUDA_VISIBLE_DEVICES": "0"}


@pytest.mark.parametrize("mechanism", ALL)
def test_pass_fds_channel_and_nothing_else_inherited(tmp_path: Path, mechanism: str) -> None:
    cmd_r, cmd_w = os.pipe()
    res_r, res_w = os.pipe()
    stray = os.open(__file__, os.O_RDONLY)
    os.set_inheritable(stray, True)  # inheritable, but not in pass_fds: must not reach the child
    try:
        spec = SandboxSpec(argv=[sys.executable, "-c", textwrap.dedent("""
            import os, sys
            cmd, res, stray = map(int, sys.argv[1:])
            request = os.read(cmd, 100)
            try:
                os.fstat(stray)
                leaked = b"stray fd open"
            except OSError:
                leaked = b"stray fd closed"
            os.write(res, request.upper() + b" " + leaked)
        """), str(cmd_r), str(res_w), str(stray)], env=ENV, writable_dir=tmp_path / "build", limits=LIMITS,
            pass_fds=(cmd_r, res_w))
        proc = sandboxed_process.start(spec, need(mechanism))
        os.close(cmd_r)
        os.close(res_w)
        os.write(cmd_w, b"ping")
        reply = b""
        while chunk := os.read(res_r, 100):
            reply += chunk
        assert proc.wait(timeout=30) == 0, proc.stderr
        proc.cleanup()
    finally:
        for fd in (cmd_w, res_r, stray):
            os.close(fd)
    assert reply == b"PING stray fd closed"


# --- the launcher: cgroup, rlimits and exec without Python between fork and exec -------------------------

EXEC_IN_PLACE = {"bwrap": "bwrap", "unshare": "unshare", "none": Path(sys.executable).name}
"""What runs at the sandbox's pid once `start` returns: the mechanism itself, the launcher gone by exec."""

LIMITS_REPORT = """
    import json, os, resource, sys
    os.read(int(sys.argv[1]), 1)  # the host looks at us before we go on
    print(json.dumps({name: resource.getrlimit(getattr(resource, name))[0]
                      for name in ("RLIMIT_FSIZE", "RLIMIT_CORE", "RLIMIT_AS", "RLIMIT_NPROC")}))
    sys.exit(7)
"""


def start_paused(tmp_path: Path, mechanism: str) -> tuple[sandboxed_process.SandboxedProcess, int]:
    """LIMITS_REPORT started and waiting; returns the process and the pipe end that lets it go on."""
    go_r, go_w = os.pipe()
    spec = SandboxSpec(argv=[sys.executable, "-c", textwrap.dedent(LIMITS_REPORT), str(go_r)], env=ENV,
                       writable_dir=tmp_path / "build", limits=LIMITS, pass_fds=(go_r,))
    try:
        return sandboxed_process.start(spec, need(mechanism)), go_w
    except BaseException:
        os.close(go_w)
        raise
    finally:
        os.close(go_r)


@pytest.mark.parametrize("mechanism", ALL)
def test_launcher_joins_the_cgroup_sets_limits_and_execs_in_place(tmp_path: Path, mechanism: str) -> None:
    proc, go = start_paused(tmp_path, mechanism)
    try:
        cmdline = Path(f"/proc/{proc.pid}/cmdline").read_bytes().split(b"\0")
        assert Path(cmdline[0].decode()).name == EXEC_IN_PLACE[mechanism], cmdline
        assert proc.cgroup is not None, "the CI host has writable cgroups"
        assert proc.pid in proc.cgroup.pids()
        os.write(go, b"x")
        assert proc.wait(timeout=30) == 7, proc.stderr  # the command's exit status, no launcher level between
    finally:
        os.close(go)
        proc.cleanup()
    # With a cgroup bounding memory and pids, AS and NPROC stay as the judge has them (CUDA needs the address space).
    assert json.loads(proc.stdout) == {"RLIMIT_FSIZE": LIMITS.file_size_bytes, "RLIMIT_CORE": 0,
                                       "RLIMIT_AS": resource.getrlimit(resource.RLIMIT_AS)[0],
                                       "RLIMIT_NPROC": resource.getrlimit(resource.RLIMIT_NPROC)[0]}


@pytest.mark.parametrize("mechanism", ALL)
def test_launcher_sets_as_and_nproc_without_a_cgroup(tmp_path: Path, mechanism: str, no_cgroup: None) -> None:
    proc, go = start_paused(tmp_path, mechanism)
    try:
        os.write(go, b"x")
        assert proc.wait(timeout=30) == 7, proc.stderr
    finally:
        os.close(go)
        proc.cleanup()
    assert json.loads(proc.stdout) == {"RLIMIT_FSIZE": LIMITS.file_size_bytes, "RLIMIT_CORE": 0,
                                       "RLIMIT_AS": LIMITS.memory_bytes, "RLIMIT_NPROC": LIMITS.max_pids}


@pytest.mark.parametrize("mechanism", ALL)
def test_a_failed_cgroup_join_is_an_isolation_error_and_nothing_runs(tmp_path: Path, mechanism: str,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """The launcher cannot join the job's cgroup: the judge's fault (system_error), whatever the command
    would have exited with, and the command never starts; the job's cgroup is removed."""
    made: list[cgroup.Cgroup | None] = []
    real_create = cgroup.Cgroup.create

    def create(cls: type, *args: int) -> cgroup.Cgroup | None:
        made.append(real_create(*args))
        return made[-1]

    monkeypatch.setattr(cgroup.Cgroup, "create", classmethod(create))
    monkeypatch.setattr(cgroup.Cgroup, "procs_files", lambda self: [tmp_path / "not-a-cgroup" / "cgroup.procs"])
    ran = tmp_path / "build" / "ran"
    spec = SandboxSpec(argv=[sys.executable, "-c", f"open({str(ran)!r}, 'w')"], env=ENV,
                       writable_dir=tmp_path / "build", limits=LIMITS)
    with pytest.raises(isolation.IsolationError, match="FileNotFoundError.*not-a-cgroup"):
        sandboxed_process.start(spec, need(mechanism))
    assert not ran.exists()
    assert made and made[0] is not None, "the CI host has writable cgroups"
    assert not any(path.exists() for path in made[0].paths.values())


def test_a_command_that_cannot_exec_is_an_isolation_error(tmp_path: Path) -> None:
    """Under "none" the launcher execs the command itself; a missing one is reported as Popen would."""
    spec = SandboxSpec(argv=["/nonexistent/judge-child"], env=ENV, writable_dir=tmp_path / "build", limits=LIMITS)
    with pytest.raises(isolation.IsolationError, match="could not start /nonexistent/judge-child: FileNotFoundError"):
        sandboxed_process.start(spec, "none")


# --- the happy path ------------------------------------------------------------------------------------

def test_torch_and_a_cpp_extension_build_inside(tmp_path: Path) -> None:
    """torch imports, and load_inline drives ninja and g++ into /build (one compile: ~30-60 s here)."""
    limits = Limits(**{**LIMITS.__dict__, "wall_s": 240, "memory_bytes": 4 << 30, "max_pids": 256,
                       "tmp_bytes": 512 << 20, "file_size_bytes": 512 << 20})
    done = sandboxed(tmp_path, "bwrap", """
        import json, torch
        from torch.utils.cpp_extension import load_inline
        ext = load_inline(name="iso_add_one", cpp_sources="torch::Tensor add_one(torch::Tensor x) { return x + 1; }",
                          functions=["add_one"], build_directory="/build", verbose=False)
        print(json.dumps({"sum": torch.ones(2).sum().item(), "ext": ext.add_one(torch.zeros(3)).tolist(),
                          "file": ext.__file__}))
    """, limits=limits, env={**ENV, "MAX_JOBS": "2", "TORCH_EXTENSIONS_DIR": "/build/ext"})
    out = report(done)
    assert out["sum"] == 2.0 and out["ext"] == [1.0, 1.0, 1.0]
    assert out["file"].startswith("/build/") and (tmp_path / "build" / Path(out["file"]).name).exists()


# --- judging refuses without bubblewrap, and records what ran ----------------------------------------

KL_CORRECT = Path(__file__).resolve().parents[1] / "corpus" / "cpu" / "kl_div_cpp_correct.py"


def test_judging_without_bubblewrap_is_a_system_error_that_says_how_to_install_it(
        judge_config: JudgeConfig, monkeypatch: pytest.MonkeyPatch) -> None:
    from sandbox import Status, judge

    monkeypatch.setenv("JUDGE_BWRAP", "/nonexistent/bwrap")
    verdict = judge("kl_div", KL_CORRECT.read_text(), "cpu", config=judge_config)  # isolation "auto"
    assert verdict.status is Status.SYSTEM_ERROR, verdict.diagnosis
    assert "bubblewrap is required" in verdict.diagnosis and "apt-get install bubblewrap" in verdict.diagnosis


def test_named_weaker_isolation_judges_and_is_recorded(judge_config: JudgeConfig,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """JUDGE_ISOLATION=unshare (here: the config field it sets) opts in; the verdict says "unshare"."""
    from dataclasses import replace

    from sandbox import Status, judge

    need("unshare")  # util-linux unshare needs CAP_SYS_ADMIN: not in an unprivileged container
    monkeypatch.setenv("JUDGE_BWRAP", "/nonexistent/bwrap")
    verdict = judge("kl_div", KL_CORRECT.read_text(), "cpu", config=replace(judge_config, isolation="unshare"))
    assert verdict.status is Status.CORRECT, verdict.diagnosis
    assert verdict.environment is not None and verdict.environment.isolation == "unshare"
    assert verdict.environment.isolation not in isolation.RANKED_MECHANISMS
