"""A precompiled `torch/extension.h`, shared by every candidate build of a host: trusted, built once, read-only.

Why: every `load_inline` main.cpp begins with `#include <torch/extension.h>` (~440k lines once preprocessed),
and g++ spends most of a main.cpp compile parsing it. With a precompiled header (PCH) the same compile took
11 CPU-s instead of 31 on the development machine, with byte-identical code (scripts/bench/bench_build.py measures
it). For a C++-only candidate main.cpp is the whole build; for a CUDA candidate it runs beside nvcc.

Trust: the parent (the judge's own process) builds the PCH from torch's header and torch's own flags, never
from candidate text, and binds the directory read-only into the build sandbox. Candidate code can neither
write it nor choose its flags beyond a fixed list of harmless ones (`SAFE_FLAG`: the parent runs g++ with
them outside any sandbox). A candidate that undoes the hook in its own child (sandbox/child/build/hooks.py) only
slows its own build.

Exactness: a PCH is used only for a main.cpp compiled with exactly the flags it was built with (less
`-DTORCH_EXTENSION_NAME=...`, which no torch header mentions), and g++ checks the rest itself (compiler
binary, macros the headers test such as `__OPTIMIZE__`) and silently reads the real header when the PCH does
not fit. The build key does not change: the object code is the same and build.ninja is untouched (the
child passes the PCH through CPATH), so an execution child's ninja finds the cached build up to date.

The subset PCH (`SUBSET_DIR`): most of a main.cpp compile that uses the PCH is not parsing but the template
instantiations torch/extension.h's inline functions require at the end of every translation unit (69% of it;
a PCH cannot hold them), most of them for torch's C++ frontend (torch::nn, optim, data, jit, serialize), which
a load_inline binding file seldom uses. So each variant also holds a PCH of `SUBSET_HEADERS`, a subset of
torch's own headers included verbatim: everything torch/extension.h gives but that frontend (ATen with every
operator, torch/types.h with torch's factories, pybind11 and torch's casters, its Python helpers). The
same main.cpp then compiled in 3.5-3.8 s instead of 7.5-7.9 s on the development machine. The build child
offers it first and falls back to the full PCH when main.cpp does not compile with it
(sandbox/child/build/hooks.py): a candidate's compile errors are always torch's own.

Layout under `<cache_root>/build-accel/` (survives restarts; one per host, like the build cache):

    <variant>/torch/extension.h.gch   the PCH; <variant> hashes the compiler, torch and the exact flags
    <variant>/torch/extension.h       a stub (`STUB_TEXT`) for a second `#include <torch/extension.h>`
    <variant>/main-subset/torch/extension.h.gch   the subset PCH, under the name main.cpp includes; absent
                                      when it could not be built (`<variant>/main-subset.failed` says why)
    <variant>/main-subset/torch/extension.h       the same stub
    <variant>/flags.json              those flags (what the child compares with), and what built it
    <variant>.lock                    held while it is built, and while eviction removes it
    <variant>.failed                  the compiler's output, when building it failed (not retried)

A variant is built in a private temporary directory and renamed into place: a reader sees nothing or a
whole PCH, and two workers asking at once build it once (the second waits on the lock, then finds it).
At most `MAX_VARIANTS` are kept, least recently used first out (each is ~0.3-0.8 GB).
"""

from __future__ import annotations

import ast
import fcntl
import functools
import hashlib
import inspect
import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

import torch

from sandbox import supervisor
from sandbox.shared.accel_layout import FLAGS_FILE, PCH_NAME, STUB_TEXT, SUBSET_DIR, normalise

ACCEL_DIR = "build-accel"
CHILD_MOUNT = "/judge-accel"
"""Where a bubblewrap build child sees the accelerator directory (read-only)."""
CHILD_CXX = "c++"
"""torch's compiler when CXX is unset, as in every build child (torch.utils.cpp_extension.get_cxx_compiler)."""
SUBSET_HEADERS = ("torch/types.h", "torch/csrc/Device.h", "torch/csrc/Dtype.h", "torch/csrc/DynamicTypes.h",
                  "torch/csrc/Exceptions.h", "torch/csrc/autograd/python_variable.h", "torch/csrc/python_headers.h",
                  "torch/csrc/utils/pybind.h", "torch/csrc/utils/python_numbers.h",
                  "torch/csrc/utils/python_tuples.h")
"""torch/extension.h is torch/all.h (torch/types.h and the C++ frontend) plus torch/python.h (these
headers, and the frontend's module bindings). The subset is torch/types.h and torch/python.h's own includes
less the frontend's: only the frontend's declarations are missing, and a main.cpp that needs them fails to
compile with the subset and is compiled again with the full PCH."""
LAYOUT = "full+main-subset+stub 2"
"""Part of a variant's id: a variant built before the layout changed (the subset PCH, the stub) is built again,
once."""
USED_FILE = "used"
MAX_VARIANTS = 4
"""Variants kept: no extra flags, and the common optimisation levels (-O2, -O3) fit with room to spare."""
MAX_PER_CANDIDATE = 2
"""Variants one candidate may cause to be built (each costs about one main.cpp compile, once per host)."""
BUILD_TIMEOUT_S = 900.0
SAFE_FLAG = r"-O[0-3sg]?|-Ofast|-g[0-3]?|-w|-Wall|-Wextra|-Wno-[a-z0-9-]+|-DNDEBUG|-ffast-math|-funroll-loops"
"""extra_cflags a PCH may be built with: plain optimisation, debug and warning flags. Anything else (paths,
plugins, specs, defines) would let candidate text steer a compiler the parent runs outside the sandbox."""


def accel_root(cache_root: Path) -> Path:
    return cache_root / ACCEL_DIR


def child_path(cache_root: Path, mechanism: str) -> str:
    """Where the build child finds the accelerator directory: bubblewrap binds it at CHILD_MOUNT."""
    return CHILD_MOUNT if mechanism == "bwrap" else str(accel_root(cache_root))


def _is_safe(flag: str) -> bool:
    return re.fullmatch(SAFE_FLAG, flag) is not None


# --- which variants a candidate needs ------------------------------------------------------------------

def wanted_flag_sets(source: str) -> list[tuple[str, ...]]:
    """The `extra_cflags` of the candidate's load_inline/load calls, where they are literal and harmless.

    A guess from the source text (the real flags are only known when the candidate runs): a wrong guess
    costs nothing but the speed-up, since the child uses a PCH only on an exact match.
    """
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return []
    found: list[tuple[str, ...]] = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        name = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", "")
        if name not in ("load_inline", "load"):
            continue
        flags: tuple[str, ...] | None = ()
        for kw in node.keywords:
            if kw.arg != "extra_cflags":
                continue
            if isinstance(kw.value, ast.Constant) and kw.value.value is None:
                flags = ()
            elif isinstance(kw.value, (ast.List, ast.Tuple)) and all(
                    isinstance(e, ast.Constant) and isinstance(e.value, str) for e in kw.value.elts):
                flags = tuple(e.value.strip() for e in kw.value.elts if e.value.strip())
            else:
                flags = None  # computed at run time: cannot know
        if flags is not None and all(_is_safe(f) for f in flags) and flags not in found:
            found.append(flags)
    return found[:MAX_PER_CANDIDATE]


# --- the flags torch compiles main.cpp with ----------------------------------------------------------

def torch_compile_flags(target: str, extra: tuple[str, ...]) -> tuple[str, list[str]]:
    """(compiler, flags) that this torch's load_inline uses for main.cpp: asked of torch itself, so that
    its version's choices (-std=c++17 or c++20, include directories) are the ones the PCH is built with."""
    import torch.utils.cpp_extension as ext  # torch's extension builder: loaded only where a build needs it

    with tempfile.TemporaryDirectory(prefix="judge-pch-flags-") as tmp:
        ninja = os.path.join(tmp, "build.ninja")
        wanted = dict(path=ninja, name="judge_pch", sources=[os.path.join(tmp, "main.cpp")],
                      extra_cflags=list(extra), extra_cuda_cflags=[], extra_sycl_cflags=[], extra_ldflags=[],
                      extra_include_paths=[], with_cuda=target == "cuda", with_sycl=False, is_standalone=False)
        params = inspect.signature(ext._write_ninja_file_to_build_library).parameters
        ext._write_ninja_file_to_build_library(**{k: v for k, v in wanted.items() if k in params})
        lines = Path(ninja).read_text().splitlines()
    values = {}
    for line in lines:  # top-level `name = value` bindings; rules and builds are indented or have no '='
        name, sep, value = line.partition(" = ")
        if sep and not line.startswith(" "):
            values[name] = value
    return child_compiler(), normalise(values["cflags"])


@functools.cache
def tool_version(argv: tuple[str, ...]) -> str:
    """The last line a tool prints about its version ("absent" when it does not run): cached per process."""
    try:
        out = subprocess.run(argv, capture_output=True, text=True, timeout=30).stdout.strip().splitlines()
    except (OSError, subprocess.SubprocessError):
        return "absent"
    return out[-1] if out else "absent"


def child_compiler() -> str:
    """The compiler a build child's load_inline runs main.cpp with, as the PCH must be built with it: g++ rejects
    a PCH written by any other executable ("created by a different GCC executable", shown only under
    -Winvalid-pch) and silently parses the header instead. torch takes $CXX, else `c++`
    (torch.utils.cpp_extension.get_cxx_compiler); the child's environment has no CXX and its own PATH
    (sandbox/supervisor.child_env), so it is `c++` on that PATH, whatever this process's CXX says. The GPU
    machines set CXX=/opt/gcc/bin/g++: every PCH built from it was rejected there (docs/benchmarks.md)."""
    return shutil.which(CHILD_CXX, path=supervisor.child_path()) or CHILD_CXX


def flag_include_dirs(flags: list[str]) -> list[Path]:
    """The include directories of a compile's tokens (`normalise`d: `-isystem` and its directory are two
    tokens), in command-line order. (sandbox/child/build/hooks.include_dirs reads torch's unsplit nvcc flags.)"""
    return [Path(flags[i + 1]) for i, tok in enumerate(flags[:-1]) if tok in ("-isystem", "-I")]


def header_path(flags: list[str]) -> Path | None:
    """torch/extension.h as the compile would find it: in the first include directory that has it."""
    return next((d / "torch" / "extension.h" for d in flag_include_dirs(flags)
                 if (d / "torch" / "extension.h").is_file()), None)


def variant_id(compiler: str, compiler_version: str, torch_version: str, flags: list[str]) -> str:
    text = json.dumps([compiler, compiler_version, torch_version, flags, LAYOUT])
    return hashlib.sha256(text.encode()).hexdigest()[:24]


# --- building a variant, once per host ---------------------------------------------------------------

@contextmanager
def _locked(path: Path, *, blocking: bool = True) -> Iterator[bool]:
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


def _start_compiler(argv: list[str], **popen: object) -> subprocess.Popen:
    """Start a PCH compiler under `_SUPERVISOR`: it and its children die with this process."""
    return subprocess.Popen([sys.executable, "-I", "-S", "-c", _SUPERVISOR, str(os.getpid()), *argv],
                            start_new_session=True, **popen)


def _kill_compiler(proc: subprocess.Popen) -> None:
    """SIGKILL the supervisor's whole group (before it is reaped, so its pid is still the group's id)."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def _run_compiler(argv: list[str], timeout_s: float) -> subprocess.CompletedProcess | None:
    """Run a PCH compiler to its end; None when it ran past `timeout_s` (then its whole tree is killed)."""
    proc = _start_compiler(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        out, err = proc.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        _kill_compiler(proc)
        proc.communicate()
        return None
    return subprocess.CompletedProcess(argv, proc.returncode, out, err)


def _complete(variant_dir: Path) -> bool:
    return (variant_dir / FLAGS_FILE).is_file() and (variant_dir / PCH_NAME).is_file()


def variant_path(root: Path, compiler: str, flags: list[str]) -> Path | None:
    """Where the variant for these flags lives (built or not); None when torch's header is not among them."""
    if header_path(flags) is None:
        return None
    return root / variant_id(compiler, tool_version((*shlex.split(compiler), "-dumpfullversion")), torch.__version__,
                             flags)


def build_variant(root: Path, compiler: str, flags: list[str], *, timeout_s: float = BUILD_TIMEOUT_S) -> Path | None:
    """The variant directory for these flags, built now if missing; None when it cannot be built here.

    Safe with any number of concurrent callers, in threads or processes: one builds, the rest wait for
    its lock and then find it (or its `.failed` record)."""
    header = header_path(flags)
    final = variant_path(root, compiler, flags)
    if header is None or final is None:
        return None
    vid = final.name
    root.mkdir(parents=True, exist_ok=True)
    if _complete(final):
        return final
    failed = root / f"{vid}.failed"
    with _locked(root / f"{vid}.lock"):
        if _complete(final):
            return final
        if failed.exists():
            return None
        tmp = Path(tempfile.mkdtemp(prefix=f".tmp-{vid}-", dir=root))
        try:
            (tmp / "torch").mkdir()
            argv = [*shlex.split(compiler), *flags, "-x", "c++-header", str(header), "-o", str(tmp / PCH_NAME)]
            started = time.monotonic()
            subset = _start_subset(tmp, compiler, flags)  # beside the full PCH: the host has cores
            try:
                proc = _run_compiler(argv, timeout_s)
                if proc is None:
                    return None  # a loaded host: try again another time
            except OSError as exc:
                failed.write_text(f"{shlex.join(argv)}\n{exc}\n")
                return None
            finally:
                subset_seconds = _finish_subset(tmp, subset, started, timeout_s)
            if proc.returncode != 0 or not (tmp / PCH_NAME).is_file():
                failed.write_text(f"{shlex.join(argv)}\n{proc.stdout}{proc.stderr}")
                return None
            for pch in (tmp / PCH_NAME, tmp / SUBSET_DIR / PCH_NAME):
                if pch.is_file():
                    pch.with_suffix("").write_text(STUB_TEXT)  # torch/extension.h beside torch/extension.h.gch
            (tmp / FLAGS_FILE).write_text(json.dumps({
                "flags": flags, "compiler": compiler, "header": str(header), "torch": torch.__version__,
                "seconds": round(time.monotonic() - started, 1), "subset_seconds": subset_seconds}))
            os.chmod(tmp, 0o755)
            shutil.rmtree(final, ignore_errors=True)  # an incomplete leftover of a killed builder
            tmp.rename(final)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    _evict(root, keep=final)
    return final


def subset_header_text(flags: list[str]) -> str | None:
    """The subset PCH's source: `SUBSET_HEADERS`, each as torch's own file found through the compile's include
    directories; None when this torch lacks one (a layout this code does not know: the full PCH only)."""
    dirs = flag_include_dirs(flags)
    if not all(any((d / name).is_file() for d in dirs) for name in SUBSET_HEADERS):
        return None
    lines = ["// The subset of torch/extension.h a load_inline main.cpp is offered first (sandbox/build/accel.py)."]
    return "\n".join([*lines, *(f"#include <{name}>" for name in SUBSET_HEADERS)]) + "\n"


def _start_subset(tmp: Path, compiler: str, flags: list[str]) -> subprocess.Popen | None:
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
        return _start_compiler(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    except OSError:
        return None


def _finish_subset(tmp: Path, proc: subprocess.Popen | None, started: float, timeout_s: float) -> float | None:
    """Wait for the subset PCH; keep it only if it was built whole. Its build time, or None without one."""
    if proc is None:
        return None
    try:
        _, err = proc.communicate(timeout=max(1.0, timeout_s - (time.monotonic() - started)))
    except subprocess.TimeoutExpired:
        _kill_compiler(proc)
        _, err = proc.communicate()
    shutil.rmtree(tmp / ".subset-source", ignore_errors=True)
    if proc.returncode == 0 and (tmp / SUBSET_DIR / PCH_NAME).is_file():
        return round(time.monotonic() - started, 1)
    shutil.rmtree(tmp / SUBSET_DIR, ignore_errors=True)
    (tmp / f"{SUBSET_DIR}.failed").write_text(f"exit status {proc.returncode}\n{err[-20000:]}")
    return None


def _evict(root: Path, keep: Path, max_variants: int = MAX_VARIANTS) -> None:
    """Drop the least recently used variants beyond max_variants (never one being built or `keep`).
    A build child that was about to read a removed PCH simply reads the real header: same result."""
    variants = [p for p in root.iterdir() if p.is_dir() and not p.name.startswith(".") and _complete(p)]
    if len(variants) <= max_variants:
        return
    for path in sorted(variants, key=_last_used)[:len(variants) - max_variants]:
        if path == keep:
            continue
        with _locked(root / f"{path.name}.lock", blocking=False) as got:
            if got:
                shutil.rmtree(path, ignore_errors=True)


def _last_used(path: Path) -> float:
    used = path / USED_FILE
    return used.stat().st_mtime if used.exists() else (path / FLAGS_FILE).stat().st_mtime


def _touch(variant: Path) -> None:
    try:
        (variant / USED_FILE).touch()
    except OSError:
        pass


# --- the entry point for the pipeline ------------------------------------------------------------------

@dataclass(frozen=True, kw_only=True)
class Preparation:
    """What `prepare` offers a build, and what it cost that build."""

    root: Path | None
    """The directory to bind into the build child, or None when there is nothing to offer."""
    building_s: float = 0.0
    """Seconds spent building variants that were missing (or waiting for another builder of one): the first
    build on a host pays them, every later one finds the variants ready (0.0)."""


def prepare(cache_root: Path, target: str, source: str) -> Path | None:
    """Make sure the PCH variants this candidate will probably use exist; the directory to bind into its
    build child, or None when there is nothing to offer (no load_inline, no g++, an unusable torch)."""
    return preparation(cache_root, target, source).root


def preparation(cache_root: Path, target: str, source: str) -> Preparation:
    """`prepare`, saying how long building missing variants took."""
    sets = wanted_flag_sets(source)
    if not sets:
        return Preparation(root=None)
    root = accel_root(cache_root)
    offered, building_s = None, 0.0
    for extra in sets:
        try:
            compiler, flags = torch_compile_flags(target, extra)
        except Exception:  # noqa: BLE001 - torch could not describe its build (no CUDA here, say): no PCH
            continue
        path = variant_path(root, compiler, flags)
        missing = path is not None and not _complete(path) and not path.with_name(f"{path.name}.failed").exists()
        started = time.monotonic()
        variant = build_variant(root, compiler, flags)
        if missing:
            building_s += time.monotonic() - started
        if variant is not None:
            _touch(variant)
            offered = root
    return Preparation(root=offered, building_s=building_s)
