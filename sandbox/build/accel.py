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
a load_inline binding file seldom uses. So each variant also holds a PCH of `SUBSET_HEADERS`
(sandbox/build/pch_compilers.py), a subset of torch's own headers included verbatim: everything torch/extension.h
gives but that frontend (ATen with every operator, torch/types.h with torch's factories, pybind11 and torch's
casters, its Python helpers). The
same main.cpp then compiled in 3.5-3.8 s instead of 7.5-7.9 s on the development machine. The build child
offers it first and falls back to the full PCH when main.cpp does not compile with it
(sandbox/child/build/hooks.py): a candidate's compile errors are always torch's own.

Layout under `<cache_root>/build-accel/` (survives restarts; one per host, like the build cache):

    <variant>/torch/extension.h.gch   the PCH; <variant> hashes the compiler, torch and the exact flags
    <variant>/torch/extension.h       a stub (`STUB_TEXT`) for a second `#include <torch/extension.h>`
    <variant>/main-subset/torch/extension.h.gch   the subset PCH, under the name main.cpp includes; absent
                                      when it could not be built (`<variant>/main-subset.failed` says why)
    <variant>/main-subset/torch/extension.h       its own stub (`SUBSET_STUB_TEXT`: nothing more is read)
    <variant>/flags.json              those flags (what the child compares with), and what built it
    <variant>.lock                    held while it is built, and while eviction removes it
    <variant>.full.lock               held while its full PCH is finished after the subset was published
    <variant>.failed                  the compiler's output, when building it failed (not retried)
    <variant>.full.failed             the same for the full PCH of a published subset-only variant
    <variant>.full.wanted             a build needed the full PCH (`want_full`): it is built, and built again by the
                                      next caller if its builder died

A variant is built in a private temporary directory and renamed into place: a reader sees nothing or a
whole PCH, and two workers asking at once build it once (the second waits on the lock, then finds it).
At most `MAX_VARIANTS` are kept, least recently used first out (each is ~0.3-0.8 GB).

Subset first, full on demand: a variant is built and published with its subset PCH alone (26 s of g++ on the 2-core
development machine, against 36 s for the full one); its full PCH is built only once something needs it. Why: with
the subset's stub standing for the whole header (`accel_layout.SUBSET_STUB_TEXT`), a main.cpp needs the full PCH only
when it uses torch's C++ frontend, which load_inline kernels seldom do, and a full PCH compiled beside the subset on
every new host (and for every flag set) took a core from the subset itself and from the first builds. Two things ask
for it: a candidate whose text says it will want it (it names torch's C++ frontend:
`accel_layout.wants_full_header`), whose build waits for it; and a build whose main.cpp failed with the subset and was
compiled against torch's own header because the full PCH was not there (`want_full`, from the build's log), after
which the full PCH is compiled in the background for the next such candidate. A thread of the asking process
(`finish_full`, holding `<variant>.full.lock`) moves it in when it is done, its stub first. A main.cpp that needs it
meanwhile is compiled against torch's own header (the child's hooks see no `.gch` there), which is what the build
would do without the judge. The full PCH runs at normal priority: builds wait for it; a niced one would starve
behind a busy host's builds. A full PCH that failed is recorded in `<variant>.full.failed` and the variant stays
subset-only; one whose builder died is started again by the next caller once it has been wanted. Where the subset
cannot be built (a torch whose layout lacks one of its headers), the variant is the full PCH alone, built at once.
"""

from __future__ import annotations

import ast
import functools
import hashlib
import inspect
import json
import os
import re
import shlex
import shutil
import subprocess
import tempfile
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import torch

from sandbox import supervisor
from sandbox.build.pch_compilers import (finish_full, finish_subset, flag_include_dirs, kill_compiler, locked,
                                          release, start_compiler, start_subset, try_lock)
from sandbox.shared.accel_layout import (FLAGS_FILE, PCH_NAME, STUB_TEXT, SUBSET_DIR, SUBSET_STUB_TEXT, has_full,
                                         normalise, usable, wants_full_header)

ACCEL_DIR = "build-accel"
CHILD_MOUNT = "/judge-accel"
"""Where a bubblewrap build child sees the accelerator directory (read-only)."""
CHILD_CXX = "c++"
"""torch's compiler when CXX is unset, as in every build child (torch.utils.cpp_extension.get_cxx_compiler)."""
LAYOUT = "full+main-subset+stub 3"
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


def header_path(flags: list[str]) -> Path | None:
    """torch/extension.h as the compile would find it: in the first include directory that has it."""
    return next((d / "torch" / "extension.h" for d in flag_include_dirs(flags)
                 if (d / "torch" / "extension.h").is_file()), None)


def variant_id(compiler: str, compiler_version: str, torch_version: str, flags: list[str]) -> str:
    text = json.dumps([compiler, compiler_version, torch_version, flags, LAYOUT])
    return hashlib.sha256(text.encode()).hexdigest()[:24]


# --- building a variant, once per host ---------------------------------------------------------------

def variant_path(root: Path, compiler: str, flags: list[str]) -> Path | None:
    """Where the variant for these flags lives (built or not); None when torch's header is not among them."""
    if header_path(flags) is None:
        return None
    return root / variant_id(compiler, tool_version((*shlex.split(compiler), "-dumpfullversion")), torch.__version__,
                             flags)


def build_variant(root: Path, compiler: str, flags: list[str], *, timeout_s: float = BUILD_TIMEOUT_S,
                  wait_full: bool = False) -> Path | None:
    """The variant directory for these flags, published now if missing; None when it cannot be built here.

    It returns once the variant is usable, which may be without its full PCH (module doc: full on demand);
    `wait_full`: not before the full PCH is in place or has failed, built now if it is not. Safe with any number of
    concurrent callers, in threads or processes: one builds, the rest wait for its lock and then find it (or its
    `.failed` record)."""
    header = header_path(flags)
    final = variant_path(root, compiler, flags)
    if header is None or final is None:
        return None
    vid = final.name
    root.mkdir(parents=True, exist_ok=True)
    if not usable(final):
        with locked(root / f"{vid}.lock"):
            if not usable(final) and ((root / f"{vid}.failed").exists()
                                      or not _build(root, final, compiler, flags, header, timeout_s)):
                return None
    if wait_full or (root / f"{vid}.full.wanted").exists():
        _full_pch(root, final, compiler, flags, header, timeout_s, wait=wait_full)
    _evict(root, keep=final)
    return final


def _start_full(root: Path, vid: str, compiler: str, flags: list[str], header: Path,
                failed: Path) -> tuple[subprocess.Popen | None, Path, list[str]]:
    """Start compiling a variant's full PCH into a temporary directory of its own: (the compiler, or None when it
    could not start, recorded in `failed`; the directory; the command)."""
    full_dir = Path(tempfile.mkdtemp(prefix=f".tmp-{vid}-full-", dir=root))
    (full_dir / "torch").mkdir()
    argv = [*shlex.split(compiler), *flags, "-x", "c++-header", str(header), "-o", str(full_dir / PCH_NAME)]
    try:
        return start_compiler(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True), full_dir, argv
    except OSError as exc:
        failed.write_text(f"{shlex.join(argv)}\n{exc}\n")
        return None, full_dir, argv


def _finish_later(root: Path, final: Path, *args: object) -> None:
    """`finish_full` on a daemon thread of this process (its compiler dies with the process: `start_compiler`)."""
    threading.Thread(target=finish_full, args=(root, final, *args), name=f"pch-full-{final.name[:8]}",
                     daemon=True).start()


def _build(root: Path, final: Path, compiler: str, flags: list[str], header: Path, timeout_s: float) -> bool:
    """Build and publish the variant (its lock held): its subset PCH alone (the full one on demand, module doc); where
    no subset can be built, its full PCH. False when it could not be built now."""
    vid = final.name
    failed = root / f"{vid}.failed"
    for stale in root.glob(f".tmp-{vid}-*"):  # a killed builder's: none is live while this lock is free (_evict)
        shutil.rmtree(stale, ignore_errors=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".tmp-{vid}-", dir=root))
    full_dir = None
    started = time.monotonic()
    try:
        subset_seconds = finish_subset(tmp, start_subset(tmp, compiler, flags), started, timeout_s)
        if subset_seconds is not None:
            _publish(tmp, final, {"flags": flags, "compiler": compiler, "header": str(header),
                                  "torch": torch.__version__, "seconds": None, "subset_seconds": subset_seconds})
            return True
        full, full_dir, argv = _start_full(root, vid, compiler, flags, header, failed)
        if full is None:
            return False
        try:
            out, err = full.communicate(timeout=max(1.0, timeout_s - (time.monotonic() - started)))
        except subprocess.TimeoutExpired:
            return False  # a loaded host: try again another time
        finally:
            if full.poll() is None:
                kill_compiler(full)
                full.communicate()
        if full.returncode != 0 or not (full_dir / PCH_NAME).is_file():
            failed.write_text(f"{shlex.join(argv)}\n{out}{err}")
            return False
        (tmp / PCH_NAME).parent.mkdir(exist_ok=True)
        os.replace(full_dir / PCH_NAME, tmp / PCH_NAME)
        _publish(tmp, final, {"flags": flags, "compiler": compiler, "header": str(header), "torch": torch.__version__,
                              "seconds": round(time.monotonic() - started, 1), "subset_seconds": subset_seconds})
        return True
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
        if full_dir is not None:
            shutil.rmtree(full_dir, ignore_errors=True)


def _publish(tmp: Path, final: Path, record: dict) -> None:
    """Stubs beside the PCHs built, the flags record, then the rename that makes the variant visible whole."""
    for pch, stub in ((tmp / PCH_NAME, STUB_TEXT), (tmp / SUBSET_DIR / PCH_NAME, SUBSET_STUB_TEXT)):
        if pch.is_file():
            pch.with_suffix("").write_text(stub)  # torch/extension.h beside torch/extension.h.gch
    (tmp / FLAGS_FILE).write_text(json.dumps(record))
    os.chmod(tmp, 0o755)
    shutil.rmtree(final, ignore_errors=True)  # an incomplete leftover of a killed builder
    tmp.rename(final)


def _full_pch(root: Path, final: Path, compiler: str, flags: list[str], header: Path, timeout_s: float, *,
              wait: bool) -> None:
    """See that a published variant's full PCH is in place or on its way: nothing when it is there or failed; when
    no builder is finishing it (its builder died), start it again here (in the background unless `wait`); with
    `wait`, return only once it is there or failed (or could not be built now)."""
    vid = final.name
    full_lock, full_failed = root / f"{vid}.full.lock", root / f"{vid}.full.failed"
    if has_full(final) or full_failed.exists():
        return
    if wait:
        with locked(full_lock):  # a builder finishing it holds this until the full PCH is in place
            pass
    if has_full(final) or full_failed.exists():
        return
    lock = try_lock(full_lock)
    if lock is None:
        return  # another caller is finishing it now
    if has_full(final) or not final.is_dir():
        release(lock)
        return
    for stale in root.glob(f".tmp-{vid}-full-*"):  # a finisher that died with its process
        shutil.rmtree(stale, ignore_errors=True)
    proc, full_dir, argv = _start_full(root, vid, compiler, flags, header, full_failed)
    if proc is None:
        shutil.rmtree(full_dir, ignore_errors=True)
        release(lock)
        return
    (finish_full if wait else _finish_later)(root, final, proc, full_dir, argv, time.monotonic(), timeout_s, lock)


def want_full(cache_root: Path, target: str, source: str) -> None:
    """A build of `source` needed a full PCH that was not there (its log says so: `accel_layout.FULL_NOT_BUILT`): mark
    its published variants' full PCHs wanted, which makes `build_variant` start compiling them in the background, for
    the next candidate that needs them."""
    root = accel_root(cache_root)
    for compiler, flags in _compile_flags(target, wanted_flag_sets(source)):
        final = variant_path(root, compiler, flags)
        if final is None or not usable(final) or has_full(final):
            continue
        (root / f"{final.name}.full.wanted").touch()
        build_variant(root, compiler, flags)


def _compile_flags(target: str, flag_sets: list[tuple[str, ...]]) -> Iterator[tuple[str, list[str]]]:
    """(compiler, flags) of each extra_cflags set (`wanted_flag_sets`) as torch would compile a main.cpp with it; none
    for a set torch cannot describe here (no CUDA, say)."""
    for extra in flag_sets:
        try:
            yield torch_compile_flags(target, extra)
        except Exception:  # noqa: BLE001 - torch could not describe its build: no PCH for it
            continue


def _evict(root: Path, keep: Path, max_variants: int = MAX_VARIANTS) -> None:
    """Drop the least recently used variants beyond max_variants (never one being built or `keep`).
    A build child that was about to read a removed PCH simply reads the real header: same result."""
    variants = [p for p in root.iterdir() if p.is_dir() and not p.name.startswith(".") and usable(p)]
    if len(variants) <= max_variants:
        return
    for path in sorted(variants, key=_last_used)[:len(variants) - max_variants]:
        if path == keep:
            continue
        with locked(root / f"{path.name}.lock", blocking=False) as got, \
                locked(root / f"{path.name}.full.lock", blocking=False) as finished:
            if got and finished:
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


def preparation(cache_root: Path, target: str, source: str, *, wait_full: bool = False) -> Preparation:
    """`prepare`, saying how long building missing variants took. `wait_full`: a build offered only full PCHs
    (config.pch_subset off) waits for them (`build_variant`); so does one whose text says its main.cpp will want
    them (`wants_full_header`)."""
    wait_full = wait_full or wants_full_header(source)
    sets = wanted_flag_sets(source)
    if not sets:
        return Preparation(root=None)
    root = accel_root(cache_root)
    offered, building_s = None, 0.0
    for compiler, flags in _compile_flags(target, sets):
        path = variant_path(root, compiler, flags)
        missing = path is not None and not usable(path) and not path.with_name(f"{path.name}.failed").exists()
        started = time.monotonic()
        variant = build_variant(root, compiler, flags, wait_full=wait_full)
        if missing:
            building_s += time.monotonic() - started
        if variant is not None:
            _touch(variant)
            offered = root
    return Preparation(root=offered, building_s=building_s)
