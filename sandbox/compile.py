"""Build a candidate's extensions in its own directory, once per (source, toolchain, target).

The build runs inside the isolated child (`python -m sandbox.child compile`): importing the candidate is
what triggers `load_inline`, and that import is candidate code. The parent only chooses the directory,
holds a lock so concurrent identical submissions build once, enforces the time limit, and turns the
compiler's output into a diagnosis that leads with the error lines. It also offers the build the judge's
accelerators (`accelerators`): the shared precompiled torch/extension.h (sandbox/build_accel.py), read-only,
and for CUDA the slim torch headers for the .cu (sandbox/slim_headers.py).
"""

from __future__ import annotations

import fcntl
import functools
import hashlib
import json
import os
import platform
import re
import shutil
import subprocess
import sys
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Iterator

import torch

if TYPE_CHECKING:
    from sandbox.config import JudgeConfig

SOURCE_FILE = "candidate.py"
RESULT_FILE = "compile.json"
LOG_LIMIT = 200_000
"""Characters of compiler output kept with a verdict; the first error lines always survive."""

_ERROR_LINE = re.compile(
    r"^(?P<loc>[^\s:]+\.(?:cu|cuh|cpp|cc|cxx|h|hpp)(?::\d+(?::\d+)?|\(\d+\)))\s*:\s*(?:fatal\s+)?error\b[^:]*:\s*(?P<msg>.*)$",
    re.M,
)


@functools.cache
def tool_version(argv: tuple[str, ...]) -> str:
    """The last line a tool prints about its version ("absent" when it does not run): cached per process."""
    try:
        out = subprocess.run(argv, capture_output=True, text=True, timeout=30).stdout.strip().splitlines()
    except (OSError, subprocess.SubprocessError):
        return "absent"
    return out[-1] if out else "absent"


def cuda_arch_list() -> str:
    """The architectures CUDA builds target: the visible GPUs', or TORCH_CUDA_ARCH_LIST."""
    if os.environ.get("TORCH_CUDA_ARCH_LIST"):
        return os.environ["TORCH_CUDA_ARCH_LIST"]
    if torch.cuda.is_available():
        caps = sorted({torch.cuda.get_device_capability(i) for i in range(torch.cuda.device_count())})
        return ";".join(f"{major}.{minor}" for major, minor in caps)
    return "9.0"


def toolchain(target: str) -> str:
    """Everything that changes what a build produces: equal strings mean a build can be reused. The C++
    compiler is the one the build child runs (`c++` on its PATH, sandbox/build_accel.child_compiler), which
    need not be the g++ or CXX of the judge's own environment."""
    from sandbox.build_accel import child_compiler

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


def accelerators(config: "JudgeConfig", target: str, source: str) -> tuple[dict[str, str], dict[Path, str]]:
    """(environment, read-only binds) that make a build child's compile faster, nothing else.

    The shared precompiled headers (sandbox/build_accel.py), built first for the variants the source will
    probably need, once per host; and, for CUDA, the slim headers for the .cu (sandbox/slim_headers.py),
    which the child writes itself, and nvcc's two front ends side by side (sandbox/nvcc_split.py), bound over
    nvcc in the child's sandbox. Nothing here can fail a build: without them the child compiles as torch
    would on its own."""
    from sandbox import isolation

    env: dict[str, str] = {"JUDGE_SLIM_HEADERS": "1"} if config.slim_headers and target == "cuda" else {}
    binds: dict[Path, str] = {}
    if target == "cuda" and config.split_nvcc and isolation.available_mechanism(config.isolation) == "bwrap":
        binds.update(_split_nvcc_binds(config.cache_root))
    if not config.precompiled_headers:
        return env, binds
    from sandbox import build_accel

    try:
        root = build_accel.prepare(config.cache_root, target, source)
    except OSError:  # a full or read-only cache disk: build without
        return env, binds
    if root is None:
        return env, binds
    mechanism = isolation.available_mechanism(config.isolation)
    if mechanism == "bwrap":
        binds[root] = build_accel.CHILD_MOUNT
    return {**env, "JUDGE_BUILD_ACCEL": build_accel.child_path(config.cache_root, mechanism),
            "JUDGE_PCH_SUBSET": "1" if config.pch_subset else "0"}, binds


def _split_nvcc_binds(cache_root: Path) -> dict[Path, str]:
    """The binds that put sandbox/nvcc_split.py in the place of the nvcc torch will run; none if there is none."""
    from torch.utils import cpp_extension

    from sandbox import nvcc_split

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


def build_key(source: str, chain: str) -> str:
    return hashlib.sha256(f"{chain}\n\0{source}".encode()).hexdigest()


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


@dataclass(frozen=True)
class BuildResult:
    ok: bool
    build_failed: bool
    """True when the compiler rejected the code (a compile_error); False with ok=False means import failed."""
    log: str
    seconds: float
    error: dict | None = None
    tripwire_hits: tuple[str, ...] = ()
    timed_out: bool = False
    cached: bool = False

    def to_json(self) -> str:
        return json.dumps({k: v for k, v in self.__dict__.items() if k != "cached"})

    @classmethod
    def from_json(cls, text: str) -> "BuildResult":
        data = json.loads(text)
        data["tripwire_hits"] = tuple(data.get("tripwire_hits", ()))
        return cls(**data, cached=True)


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
