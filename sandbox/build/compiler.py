"""Build a candidate's extensions in its own directory, once per (source, toolchain, target).

The build runs inside the isolated child (`python -m sandbox.child compile`): importing the candidate is
what triggers `load_inline`, and that import is candidate code. The parent only chooses the directory,
holds a lock so concurrent identical submissions build once, enforces the time limit, and turns the
compiler's output into a diagnosis that leads with the error lines. It also offers the build the judge's
accelerators (`accelerators`): the shared precompiled torch/extension.h (sandbox/build/accel.py), read-only,
and for CUDA the slim torch headers for the .cu (sandbox/child/build/slim_headers.py).

Layout of one build key (`KeyPaths`), and who may write what:

    <build_root>/<key>.lock         the builders' lock (flock)
    <build_root>/<key>/             judge-owned: no child ever sees this directory itself
        candidate.py                the checked source; bound read-only into the build child, which imports it
        result.json                 the build's outcome, written by the parent only (`store`)
        build/                      THE CANDIDATE'S: writable at /build in the build child

Everything under `build/` was written by candidate code (the build child imports the candidate), so the
parent treats it as hostile: it never follows a link there, refuses a build that leaves a link or a
special file (`audit`), and keeps what it trusts (the source, the result) one level up, where the child
cannot reach. A candidate that left `build/compile.json` as a link to the judge's own files, or rewrote
its `candidate.py` from a static initializer while it was built, changes nothing the parent reads.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import platform
import re
import shutil
import stat
import sys
import sysconfig
import uuid
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Iterator, Mapping

import torch

from sandbox import isolation
from sandbox.shared import languages
from sandbox.build import accel as build_accel
from sandbox.build import blame
from sandbox.build import nvcc_split
from sandbox.build.accel import child_compiler, tool_version
from sandbox.shared.accel_layout import FULL_NOT_BUILT, HOOKS_VERSION

if TYPE_CHECKING:
    from sandbox.config import JudgeConfig

SOURCE_FILE = "candidate.py"
RESULT_FILE = "result.json"
BUILD_DIR = "build"
LOG_LIMIT = 200_000
"""Characters of compiler output kept with a verdict; the first error lines always survive."""

_ERROR_LINE = re.compile(
    r"^(?P<loc>[^\s:]+\.(?:cu|cuh|cpp|cc|cxx|h|hpp)(?::\d+(?::\d+)?|\(\d+\)))\s*:\s*(?:fatal\s+)?error\b[^:]*:\s*(?P<msg>.*)$",
    re.M,
)


def cuda_arch_list() -> str:
    """The architectures CUDA builds target: TORCH_CUDA_ARCH_LIST, or the visible GPUs' (sandbox/shared/languages.py,
    where the JIT languages' target comes from the same list)."""
    return languages.arch_list()


def toolchain(target: str) -> str:
    """Everything that changes what a build produces: equal strings mean a build can be reused. The C++
    compiler is the one the build child runs (`c++` on its PATH, sandbox/build/accel.child_compiler), which
    need not be the g++ or CXX of the judge's own environment."""
    compiler = child_compiler()
    parts = [
        f"python {platform.python_version()}",
        f"torch {torch.__version__}",
        f"c++ {compiler} {tool_version((compiler, '-dumpfullversion'))}",
        f"target {target}",
    ]
    if target == "cuda":
        parts += [f"cuda {torch.version.cuda}", f"nvcc {tool_version(('nvcc', '--version'))}",
                  f"arch {cuda_arch_list()}"]
    return "; ".join(parts)


def build_inputs(target: str, judge_env: Mapping[str, str]) -> str:
    """Where the toolchain lives and what the judge adds to the build child's environment: the rest of what a
    build is made from, beside the versions of `toolchain`. Part of the build key, not of a verdict (host paths
    say nothing to a submitter).

    Why the paths: torch writes the include and library directories of the Python and torch in use (and for CUDA,
    CUDA_HOME's nvcc and headers) into build.ninja, and the execution child refuses a build whose command line is
    not the one it would write (sandbox/child/no_build.py). Two installs of the same versions at different paths
    (two virtual environments, a re-created one, a fleet's images) sharing one build root must not share a build.
    The torch directory is taken as torch's extension builder takes it (`abspath`, links not resolved): a linked
    prefix is another command line. `judge_env`: the variables the judge sets for the build child (the CUDA
    architectures, the shapes the JIT languages compile for)."""
    parts = {"python prefix": sys.prefix, "python include": sysconfig.get_paths()["include"],
             "torch": os.path.dirname(os.path.abspath(torch.__file__)), "judge env": dict(sorted(judge_env.items()))}
    if target == "cuda":
        parts["cuda home"] = _cuda_home()
    return json.dumps(parts, sort_keys=True)


def _cuda_home() -> str | None:
    """The CUDA toolkit torch's extension builder uses (its nvcc and headers are in the build command)."""
    from torch.utils import cpp_extension  # not at the top: the parent needs torch's extension builder only for CUDA

    return cpp_extension.CUDA_HOME


@dataclass(frozen=True, kw_only=True)
class Offer:
    """What `offer_accelerators` gives one build child."""

    env: dict[str, str]
    binds: dict[Path, str]
    pch_building_s: float = 0.0
    """Seconds this build spent first building the host's shared precompiled headers (sandbox/build/accel.py)."""


def accelerators(config: "JudgeConfig", target: str, source: str) -> tuple[dict[str, str], dict[Path, str]]:
    """(environment, read-only binds) of `offer_accelerators`."""
    offer = offer_accelerators(config, target, source)
    return offer.env, offer.binds


def offer_accelerators(config: "JudgeConfig", target: str, source: str) -> Offer:
    """The environment and read-only binds that make a build child's compile faster, nothing else.

    The shared precompiled headers (sandbox/build/accel.py), built first for the variants the source will
    probably need, once per host; and, for CUDA, the slim headers for the .cu (sandbox/child/build/slim_headers.py),
    which the child writes itself, and nvcc's two front ends side by side (sandbox/build/nvcc_split.py), bound over
    nvcc in the child's sandbox. Nothing here can fail a build: without them the child compiles as torch
    would on its own."""
    env: dict[str, str] = {"JUDGE_SLIM_HEADERS": "1"} if config.slim_headers and target == "cuda" else {}
    binds: dict[Path, str] = {}
    if target == "cuda" and config.split_nvcc and isolation.available_mechanism(config.isolation) == "bwrap":
        binds.update(_split_nvcc_binds(config.cache_root))
    if not config.precompiled_headers:
        return Offer(env=env, binds=binds)
    try:
        prepared = build_accel.preparation(config.cache_root, target, source, wait_full=not config.pch_subset)
    except OSError:  # a full or read-only cache disk: build without
        return Offer(env=env, binds=binds)
    if prepared.root is None:
        return Offer(env=env, binds=binds, pch_building_s=prepared.building_s)
    mechanism = isolation.available_mechanism(config.isolation)
    if mechanism == "bwrap":
        binds[prepared.root] = build_accel.CHILD_MOUNT
    return Offer(env={**env, "JUDGE_BUILD_ACCEL": build_accel.child_path(config.cache_root, mechanism),
                  "JUDGE_PCH_SUBSET": "1" if config.pch_subset else "0"}, binds=binds,
                 pch_building_s=prepared.building_s)


def want_full_pch(config: "JudgeConfig", target: str, source: str, log: str) -> None:
    """After a build whose main.cpp needed the full precompiled header and found it not built yet (the child's hooks
    say so in the log): have it built in the background for the next candidate (sandbox/build/accel.py, full on
    demand). Never fails the build it follows."""
    if not config.precompiled_headers or FULL_NOT_BUILT not in log:
        return
    try:
        build_accel.want_full(config.cache_root, target, source)
    except OSError:  # a full or read-only cache disk: later builds go without, as this one did
        pass


def _split_nvcc_binds(cache_root: Path) -> dict[Path, str]:
    """The binds that put sandbox/build/nvcc_split.py in the place of the nvcc torch will run; none if there is none."""
    from torch.utils import cpp_extension  # not at the top: the parent needs torch's extension builder only here

    if not cpp_extension.CUDA_HOME:
        return {}
    nvcc = Path(cpp_extension.CUDA_HOME) / "bin" / "nvcc"
    if not nvcc.is_file():
        return {}
    try:
        driver = nvcc_split.install(cache_root, sys.executable)
    except OSError:  # a full or read-only cache disk: nvcc as it is
        return {}
    return nvcc_split.sandbox_binds(driver, nvcc)


def build_key(source: str, chain: str, inputs: str) -> str:
    """`chain`: `toolchain`'s versions; `inputs`: `build_inputs`' paths and environment."""
    return hashlib.sha256(f"{chain}\n\0{inputs}\n\0{source}".encode()).hexdigest()


@dataclass(frozen=True)
class KeyPaths:
    """Where one build key's files live (see the module docstring for who may write each)."""

    key_dir: Path

    @classmethod
    def of(cls, build_root: Path, key: str) -> "KeyPaths":
        return cls(build_root / key)

    @property
    def source(self) -> Path:
        return self.key_dir / SOURCE_FILE

    @property
    def result(self) -> Path:
        return self.key_dir / RESULT_FILE

    @property
    def build(self) -> Path:
        return self.key_dir / BUILD_DIR


@contextmanager
def build_lock(build_root: Path, key: str) -> Iterator[None]:
    """One builder per key across processes; others wait, then reuse the result."""
    build_root.mkdir(parents=True, exist_ok=True)
    with open(build_root / f"{key}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


@dataclass(frozen=True, kw_only=True)
class BuildResult:
    ok: bool
    build_failed: bool
    """True when the compiler rejected the code (a compile_error); False with ok=False means import failed."""
    log: str
    seconds: float
    error: dict | None = None
    tripwire_hits: tuple[str, ...] = ()
    timed_out: bool = False
    infrastructure: str | None = None
    """Why this build says nothing about the candidate: the compiler or the build child was killed, the
    sandbox did not start, the child broke the protocol, the disk was full, a precompiled header was at
    fault. A system_error, never stored: the next attempt builds again."""
    refused: str | None = None
    """What the build left in its directory that the judge will not read (a link, a special file)."""
    broken_protocol: str | None = None
    """Why the build child's one message was not one (malformed, or forged on the judge's pipe by code that ran at
    the candidate's import): the candidate's outcome, a compile_error, stored like any other."""
    compile_errors: tuple[dict, ...] = ()
    """A failed compile's first errors, placed in candidate.py (sandbox/compile_errors.place; CompileError's
    fields): worked out once, from the build directory as the build left it, and stored with the outcome."""
    pch_building_s: float = 0.0
    """Of `seconds`, those spent building the host's shared precompiled headers first: this build's, not stored."""
    stall: dict | None = None
    """Where the build ran out of time while the host stopped or starved it (sandbox/build/stall.py
    `StallReport.to_dict`): with `infrastructure`, the host's stall, never stored."""
    build_id: str = ""
    """Names this one build of its key (`store_result` sets it): what `forget` checks before removing a build."""
    cached: bool = False

    @property
    def storable(self) -> bool:
        """Whether this outcome is the candidate's own, and so the same next time."""
        return not self.timed_out and self.infrastructure is None

    def to_record(self) -> dict:
        return {k: v for k, v in self.__dict__.items() if k not in ("cached", "pch_building_s")}

    @classmethod
    def from_record(cls, data: dict) -> "BuildResult":
        data = {**data, "tripwire_hits": tuple(data.get("tripwire_hits", ())),
                "compile_errors": tuple(data.get("compile_errors", ()))}
        return cls(**data, cached=True)


def accelerator_config(config: "JudgeConfig", target: str) -> str:
    """Everything besides the toolchain that took part in a build: which accelerators were offered, and the
    versions of the code that offers them. Part of every stored outcome (`load_result`)."""
    return json.dumps({
        "precompiled_headers": config.precompiled_headers, "pch_subset": config.pch_subset,
        "slim_headers": config.slim_headers and target == "cuda", "split_nvcc": config.split_nvcc and target == "cuda",
        "pch_layout": build_accel.LAYOUT, "hooks": HOOKS_VERSION}, sort_keys=True)


def load_result(paths: KeyPaths, accel: str) -> BuildResult | None:
    """The stored outcome of this key's build, when it may be reused; None to build again.

    A success is reused whatever accelerators built it: they change how fast main.cpp and the .cu compile,
    never the object code (sandbox/build/accel.py, sandbox/child/build/slim_headers.py), and every fallback ends with
    torch's own headers. A failure is reused only under the accelerator configuration that produced it: a
    compile error that a PCH or the slim headers caused, and that a fixed judge would not give, must not
    outlive the fix."""
    try:
        record = json.loads(_read_private(paths.result))
        result = BuildResult.from_record(record["result"])
    except FileNotFoundError:
        return None
    except (OSError, ValueError, KeyError, TypeError):  # a torn or foreign file: build again, store anew
        return None
    if result.ok and not result.refused:
        return result if paths.build.is_dir() else None
    return result if record.get("accelerators") == accel else None


def store_result(paths: KeyPaths, result: BuildResult, accel: str) -> BuildResult:
    """Write the outcome beside the build, where only this process writes: a new file renamed into place, so
    a reader sees the old outcome or the new one, never half of one. Returns it with its `build_id`. Raises
    OSError (a full disk)."""
    result = replace(result, build_id=uuid.uuid4().hex)
    _write_private(paths.result, json.dumps({"accelerators": accel, "result": result.to_record()}))
    return result


def forget(build_root: Path, paths: KeyPaths, build_id: str) -> bool:
    """Remove this key's stored build when it is still the build `build_id` (another process may have built the
    key again since): the next `prepare` of the key builds afresh. False when it was not there any more.

    For a stored build that the execution child refused to load here (sandbox/pipeline.py `execute`): made on
    a host or install whose build command differs in something the key does not hold."""
    with build_lock(build_root, paths.key_dir.name):
        try:
            stored = json.loads(_read_private(paths.result))["result"].get("build_id")
        except (OSError, ValueError, KeyError, TypeError, AttributeError):
            return False
        if stored != build_id:
            return False
        paths.result.unlink(missing_ok=True)
        clear_build(paths.build)
        return True


def start_build(paths: KeyPaths, source: str) -> None:
    """A fresh key directory: the checked source (the file both children import) and an empty build dir.
    Whatever an earlier build of this key left is removed first (shutil.rmtree unlinks links, never follows
    them). Raises OSError (a full disk)."""
    clear_build(paths.key_dir)
    paths.build.mkdir(parents=True)
    _write_private(paths.source, source)


def empty_build_dir(paths: KeyPaths) -> None:
    """The key's build directory emptied for another build of the same source (what a failed build left removed)."""
    clear_build(paths.build)
    paths.build.mkdir(parents=True)


def audit(build_dir: Path) -> str | None:
    """What the build left in its directory that the judge will not read, or None when it is all plain files
    and directories. The parent copies the build directory for every execution (sandbox/execution/run.py) and
    reads ninja's files in it: a symbolic link there could point it at another build or the judge's own
    files, a FIFO could block it, a device could be anything, a second hard link could tie two paths it
    believes distinct. Nothing honest makes any of these: torch, ninja and g++ write plain files."""
    for root, dirs, files in os.walk(build_dir):  # never descends into a linked directory
        for name in [*dirs, *files]:
            path = Path(root) / name
            info = path.lstat()
            where = path.relative_to(build_dir)
            if stat.S_ISLNK(info.st_mode):
                return f"a symbolic link at {where}"
            if not (stat.S_ISREG(info.st_mode) or stat.S_ISDIR(info.st_mode)):
                return f"a special file (not a regular file or directory) at {where}"
            if stat.S_ISREG(info.st_mode) and info.st_nlink > 1:
                return f"a file with {info.st_nlink} hard links at {where}"
    return None


def place_source(paths: KeyPaths) -> None:
    """Put the checked source at build/candidate.py, replacing whatever the build left there.

    Why: the execution child is started on a copy of the build directory (sandbox/execution/run.py) and imports
    /build/candidate.py unless it is told another source (sandbox/supervisor.ChildSession's `source`).
    Written through a descriptor of the build directory, without following a link, as a new file: what the
    build wrote there (a link, a rewritten module) is gone first. Run only after `audit` passed."""
    fd = os.open(paths.build, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
    try:
        try:
            os.unlink(SOURCE_FILE, dir_fd=fd)
        except FileNotFoundError:
            pass
        out = os.open(SOURCE_FILE, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o444, dir_fd=fd)
        with os.fdopen(out, "w", encoding="utf-8") as fh:
            fh.write(_read_private(paths.source))
    finally:
        os.close(fd)


def _write_private(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o644)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def _read_private(path: Path) -> str:
    with os.fdopen(os.open(path, os.O_RDONLY | os.O_NOFOLLOW), encoding="utf-8") as fh:
        return fh.read()


DISK_FULL = "disk_full"
"""`details["infrastructure_kind"]` of a build that failed because the judge's disk (the build root) was full: a
machine-readable reason, so that the caller can wait for space instead of counting the failure as an ordinary one."""


def infrastructure_kind(why: str) -> dict[str, str]:
    """`{"infrastructure_kind": DISK_FULL}` when the judge's failure `why` says its disk was full, else empty. `why` is
    the judge's own: an OSError of the parent's, or a reason sandbox/build/blame.py confirmed."""
    return {"infrastructure_kind": DISK_FULL} if blame.NO_SPACE.search(why) else {}


def first_errors(log: str, limit: int = 5) -> list[str]:
    """The compiler's first error lines as 'file:line: message', candidate-relative paths."""
    found = []
    for match in _ERROR_LINE.finditer(log):
        loc = re.sub(r"^.*/", "", match.group("loc"))
        found.append(f"{loc}: {match.group('msg').strip()}")
        if len(found) == limit:
            break
    return found


def trim_log(log: str) -> str:
    """Keep the error lines first, then as much of the full log as fits."""
    errors = first_errors(log, limit=20)
    head = ("\n".join(errors) + "\n--- full log ---\n") if errors else ""
    body = log if len(log) <= LOG_LIMIT else log[:LOG_LIMIT // 2] + "\n[... truncated ...]\n" + log[-LOG_LIMIT // 2:]
    return head + body


def clear_build(build_dir: Path) -> None:
    shutil.rmtree(build_dir, ignore_errors=True)
