"""The processes and locks behind the shared precompiled headers (sandbox/build/accel.py decides what to build and
when): the compilers, which die with the process that started them; the subset PCH's source; the thread that moves a
published variant's full PCH in; the file locks that make one builder per variant across processes.
"""

from __future__ import annotations

import fcntl
import json
import os
import shlex
import shutil
import signal
import subprocess
import sys
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

from sandbox import scheduling
from sandbox.shared.accel_layout import FLAGS_FILE, PCH_NAME, STUB_TEXT, SUBSET_DIR, usable

SUBSET_HEADERS = ("torch/types.h", "torch/csrc/Device.h", "torch/csrc/Dtype.h", "torch/csrc/DynamicTypes.h",
                  "torch/csrc/Exceptions.h", "torch/csrc/autograd/python_variable.h", "torch/csrc/python_headers.h",
                  "torch/csrc/utils/pybind.h", "torch/csrc/utils/python_numbers.h",
                  "torch/csrc/utils/python_tuples.h")
"""torch/extension.h is torch/all.h (torch/types.h and the C++ frontend) plus torch/python.h (these
headers, and the frontend's module bindings). The subset is torch/types.h and torch/python.h's own includes
less the frontend's: only the frontend's declarations are missing, and a main.cpp that needs them fails to
compile with the subset and is compiled again with the full PCH."""


def flag_include_dirs(flags: list[str]) -> list[Path]:
    """The include directories of a compile's tokens (`normalise`d: `-isystem` and its directory are two
    tokens), in command-line order. (sandbox/child/build/hooks.include_dirs reads torch's unsplit nvcc flags.)"""
    return [Path(flags[i + 1]) for i, tok in enumerate(flags[:-1]) if tok in ("-isystem", "-I")]


@contextmanager
def locked(path: Path, *, blocking: bool = True) -> Iterator[bool]:
    with open(path, "a") as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | (0 if blocking else fcntl.LOCK_NB))
        except BlockingIOError:
            yield False
            return
        try:
            yield True
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


_SUPERVISOR = """\
import ctypes, os, signal, subprocess, sys
parent, argv = int(sys.argv[1]), sys.argv[2:]
def kill_tree(*_):
    os.killpg(0, signal.SIGKILL)
def parent_died(*_):
    if os.getppid() != parent:
        kill_tree()
signal.signal(signal.SIGTERM, kill_tree)
signal.signal(signal.SIGUSR1, parent_died)
ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGUSR1, 0, 0, 0)  # PR_SET_PDEATHSIG
parent_died()
code = subprocess.call(argv)
sys.exit(code if code >= 0 else 128 - code)
"""
"""`python -I -S -c _SUPERVISOR PARENT_PID ARGV...` runs a PCH compiler (ARGV) that dies with the process that
started it. Trusted code, judge's own compiles; started with `start_new_session`, so it leads a process group
holding the whole compiler tree.

Why not exec the compiler in place, as `sandbox.execution.baseline`'s `_WATCHED_MAIN` does: PR_SET_PDEATHSIG covers only
the process that asks, and g++ is a driver that runs cc1plus as its child, which would outlive a killed g++
(and the PCH compile is cc1plus's tens of seconds). So this stays as the group's parent and, when its own
parent-death signal comes, SIGKILLs the group, itself and the compilers. The signal fires when the *thread*
that started it exits, not only the process: the handler acts only once getppid() is no longer the starting
process (a thread's exit reparents it to another thread of that process, with the same pid, and arms the
signal again for the next one). The check right after the request catches a starter that died before it.
SIGTERM (a timeout's kill, an operator) also takes the whole group. No Python runs between fork and exec in
the worker (no pre-exec callback in `Popen`, see sandbox/isolation.py): the request is made here, after exec, as
the baseline process does; `setpriv --pdeathsig` would have the same one-process reach and needs util-linux 2.33+."""


def start_compiler(argv: list[str], **popen: object) -> subprocess.Popen:
    """Start a PCH compiler under `_SUPERVISOR`: it and its children die with this process. Started from a niced
    thread (a worker's later header variants), its session is niced as much (sandbox/scheduling.py: otherwise, in a
    session of its own, it would take a candidate's fair share of the CPU)."""
    proc = subprocess.Popen([sys.executable, "-I", "-S", "-c", _SUPERVISOR, str(os.getpid()), *argv],
                            start_new_session=True, **popen)
    scheduling.pass_on_nice(proc.pid)
    return proc


def kill_compiler(proc: subprocess.Popen) -> None:
    """SIGKILL the supervisor's whole group (before it is reaped, so its pid is still the group's id)."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def try_lock(path: Path) -> int | None:
    """A lock file's descriptor with its lock taken, or None when another holds it (the holder releases it by
    closing it: `release`)."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        return None
    return fd


def release(fd: int | None) -> None:
    if fd is not None:
        os.close(fd)  # closing the only descriptor of its open file drops the flock


def finish_full(root: Path, final: Path, proc: subprocess.Popen, full_dir: Path, argv: list[str], started: float,
                 timeout_s: float, lock: int | None) -> None:
    """Wait for a published variant's full PCH and move it in: its stub first, then the `.gch` (one rename), so
    that no reader finds a `.gch` without the header a second include needs. Releases the full lock at the end."""
    try:
        try:
            out, err = proc.communicate(timeout=max(1.0, timeout_s - (time.monotonic() - started)))
        except subprocess.TimeoutExpired:
            kill_compiler(proc)
            proc.communicate()
            return  # a loaded host: the next caller starts it again
        if proc.returncode != 0 or not (full_dir / PCH_NAME).is_file():
            (root / f"{final.name}.full.failed").write_text(f"{shlex.join(argv)}\n{out}{err}")
            return
        if not usable(final):
            return  # evicted meanwhile
        stub = final / "torch" / "extension.h"
        stub.parent.mkdir(exist_ok=True)
        staged = stub.with_name(".extension.h.tmp")
        staged.write_text(STUB_TEXT)
        os.replace(staged, stub)
        os.replace(full_dir / PCH_NAME, final / PCH_NAME)
        record = json.loads((final / FLAGS_FILE).read_text())
        record["seconds"] = round(time.monotonic() - started, 1)
        staged = final / f".{FLAGS_FILE}.tmp"
        staged.write_text(json.dumps(record))
        os.replace(staged, final / FLAGS_FILE)
    except Exception:  # noqa: BLE001 - a thread of the judge's: candidates then compile against torch's own header
        (root / f"{final.name}.full.failed").write_text(f"{shlex.join(argv)}\nmoving it in failed\n")
    finally:
        shutil.rmtree(full_dir, ignore_errors=True)
        release(lock)


def subset_header_text(flags: list[str]) -> str | None:
    """The subset PCH's source: `SUBSET_HEADERS`, each as torch's own file found through the compile's include
    directories; None when this torch lacks one (a layout this code does not know: the full PCH only)."""
    dirs = flag_include_dirs(flags)
    if not all(any((d / name).is_file() for d in dirs) for name in SUBSET_HEADERS):
        return None
    lines = ["// The subset of torch/extension.h a load_inline main.cpp is offered first (sandbox/build/accel.py)."]
    return "\n".join([*lines, *(f"#include <{name}>" for name in SUBSET_HEADERS)]) + "\n"


def start_subset(tmp: Path, compiler: str, flags: list[str]) -> subprocess.Popen | None:
    """Start compiling the subset PCH into `tmp/SUBSET_DIR`; None when there is none to build."""
    text = subset_header_text(flags)
    if text is None:
        return None
    source = tmp / ".subset-source" / "torch" / "extension.h"  # not kept: a PCH needs none of its sources
    source.parent.mkdir(parents=True)
    source.write_text(text)
    (tmp / SUBSET_DIR / "torch").mkdir(parents=True)
    argv = [*shlex.split(compiler), *flags, "-x", "c++-header", str(source), "-o", str(tmp / SUBSET_DIR / PCH_NAME)]
    try:
        return start_compiler(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    except OSError:
        return None


def finish_subset(tmp: Path, proc: subprocess.Popen | None, started: float, timeout_s: float) -> float | None:
    """Wait for the subset PCH; keep it only if it was built whole. Its build time, or None without one."""
    if proc is None:
        return None
    try:
        _, err = proc.communicate(timeout=max(1.0, timeout_s - (time.monotonic() - started)))
    except subprocess.TimeoutExpired:
        kill_compiler(proc)
        _, err = proc.communicate()
    shutil.rmtree(tmp / ".subset-source", ignore_errors=True)
    if proc.returncode == 0 and (tmp / SUBSET_DIR / PCH_NAME).is_file():
        return round(time.monotonic() - started, 1)
    shutil.rmtree(tmp / SUBSET_DIR, ignore_errors=True)
    (tmp / f"{SUBSET_DIR}.failed").write_text(f"exit status {proc.returncode}\n{err[-20000:]}")
    return None
