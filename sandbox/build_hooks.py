"""Inside the build child: two hooks on torch's extension build that make it faster and change nothing else.

Runs in the isolated compile child before the candidate is imported (sandbox/child.py `compile_only`).
build.ninja itself is left exactly as torch writes it: the execution child, which runs the same load_inline
without these hooks, then finds every output up to date instead of rebuilding.

1. The precompiled torch/extension.h for main.cpp (`JUDGE_BUILD_ACCEL`, sandbox/build_accel.py). The hook
   looks at the flags main.cpp will be compiled with; when they equal those of a PCH variant in the read-only
   accelerator directory, it sets CPATH to that variant for the ninja run that follows, and clears it
   otherwise. Why CPATH: g++ searches CPATH after the command line's -I directories and before its -isystem
   ones, so the variant's `torch/extension.h.gch` is found just before torch's own header, and only by a
   compile that includes it; `gcc -E` (how nvcc preprocesses a .cu) ignores precompiled headers. A
   candidate that sets CPATH itself, or adds -I directories (which could shadow torch's headers), gets no PCH.

2. Slim torch headers for the `.cu` (`JUDGE_SLIM_HEADERS`, sandbox/slim_headers.py). The hook writes them
   into the extension's build directory and points nvcc, and only nvcc, at them with `-I` in
   `NVCC_APPEND_FLAGS` for the ninja run. If a `.cu` fails to compile that way, the slim headers are removed
   and ninja runs again: the `.cu` is compiled against torch's own headers, as without the judge, and that
   run's outcome (success, or the compiler's errors) is the build's. Each decision is one `[judge]` line in
   the build log.
"""

from __future__ import annotations

import inspect
import json
import os
import re
import shlex
import sys
from pathlib import Path
from typing import Any, Callable

from sandbox import slim_headers
from sandbox.build_accel import FLAGS_FILE, PCH_NAME, normalise

_OURS = "JUDGE_PCH_CPATH"
"""Remembers the CPATH value this hook set, to tell it from one the candidate set."""
NVCC_ENV = "NVCC_APPEND_FLAGS"
"""Flags nvcc appends to every command line (CUDA 11.5+); g++ never reads it, so main.cpp is untouched."""
_CU_OBJECT_FAILED = re.compile(r"^FAILED: .*\.cuda\.o\b", re.M)
"""ninja's line for a failed `.cu` compile (torch names a .cu's object `<stem>.cuda.o`)."""


def note(text: str) -> None:
    """One line in the build log (the parent keeps the child's stderr with the verdict)."""
    print(f"[judge] {text}", file=sys.stderr, flush=True)


# --- 1. the precompiled header for main.cpp -------------------------------------------------------------------

def variants(accel_dir: str) -> list[tuple[list[str], str]]:
    """(flags, directory) of each complete PCH variant offered to this build."""
    found = []
    root = Path(accel_dir)
    if not root.is_dir():
        return found
    for entry in sorted(root.iterdir()):
        if entry.name.startswith(".") or not (entry / PCH_NAME).is_file():
            continue
        try:
            flags = json.loads((entry / FLAGS_FILE).read_text())["flags"]
        except (OSError, ValueError, KeyError):
            continue
        found.append((flags, str(entry)))
    return found


def choose(cflags: list[str], offered: list[tuple[list[str], str]]) -> str | None:
    """The variant directory built with exactly these flags, if any."""
    tokens = normalise(cflags)
    if any(t.startswith(("-I", "-iquote", "-include", "-nostdinc", "-imacros")) for t in tokens):
        return None  # the candidate's own include paths come before CPATH and may shadow torch's headers
    for flags, directory in offered:
        if flags == tokens:
            return directory
    return None


def offer_pch(cflags: list[str], offered: list[tuple[list[str], str]]) -> None:
    current = os.environ.get("CPATH")
    if current is not None and current != os.environ.get(_OURS):
        return  # the candidate's own CPATH: leave it alone
    chosen = choose(cflags, offered)
    if chosen:
        os.environ["CPATH"] = os.environ[_OURS] = chosen
        note(f"main.cpp offered the precompiled torch/extension.h in {chosen}")  # tests look for this line
    else:
        os.environ.pop("CPATH", None)
        os.environ.pop(_OURS, None)


# --- 2. slim headers for the .cu, with torch's own as the fallback ---------------------------------------------

def include_dirs(cuda_cflags: list[str]) -> list[Path]:
    """The include directories of nvcc's command line, in order (torch passes `-isystem DIR` as one item)."""
    tokens = shlex.split(" ".join(cuda_cflags))
    dirs = []
    for i, token in enumerate(tokens):
        if token in ("-I", "-isystem") and i + 1 < len(tokens):
            dirs.append(Path(tokens[i + 1]))
        elif token.startswith(("-I", "-isystem")) and token not in ("-I", "-isystem"):
            dirs.append(Path(token[2:] if token.startswith("-I") else token[len("-isystem"):]))
    return dirs


def prepare_slim(build_directory: Path, cuda_cflags: list[str], sources: list[str]) -> bool:
    """Write the slim headers for this extension's .cu files; False when it is built with the full headers."""
    slim_headers.remove(build_directory)  # a previous load_inline of the same name in this process
    cu_files = [Path(s) for s in sources if s.endswith(".cu")]
    if not cu_files:
        return False
    name = build_directory.name
    try:
        texts = [p.read_bytes()[: slim_headers.READ_LIMIT + 1].decode("utf-8", "replace") for p in cu_files]
    except OSError:
        return False
    reasons = [r for r in map(slim_headers.skip_reason, texts) if r]
    if reasons:
        note(f"{name}: .cu built with torch's full headers ({reasons[0]})")
        return False
    built = slim_headers.write(build_directory, texts, include_dirs(cuda_cflags))
    if built is None:
        note(f"{name}: .cu built with torch's full headers (this torch's headers are not laid out as expected)")
        return False
    return True


def run_with_fallback(original: Callable[..., Any], build_directory: str, verbose: bool, error_prefix: str) -> Any:
    """torch's ninja run with the slim headers offered to nvcc; again without them if a .cu failed."""
    directory = Path(build_directory)
    if not (directory / slim_headers.SLIM_DIR / slim_headers.SLIM_HEADER).is_file():
        return original(build_directory, verbose, error_prefix)
    theirs = os.environ.get(NVCC_ENV)
    os.environ[NVCC_ENV] = f"{theirs} " if theirs else ""
    os.environ[NVCC_ENV] += f"-I{directory / slim_headers.SLIM_DIR}"
    try:
        result = original(build_directory, verbose, error_prefix)
        note(f"{directory.name}: .cu built against the slim torch headers (sandbox/slim_headers.py)")
        return result
    except RuntimeError as exc:
        if not _CU_OBJECT_FAILED.search(str(exc)):
            raise  # main.cpp or the link failed: the same with any headers
        note(f"{directory.name}: .cu needs torch's full headers (slim build: {slim_headers.first_error(str(exc))}); "
             "building it again with them")
    finally:
        if theirs is None:
            os.environ.pop(NVCC_ENV, None)
        else:
            os.environ[NVCC_ENV] = theirs
    slim_headers.remove(directory)
    return original(build_directory, verbose, error_prefix)


# --- installing both -------------------------------------------------------------------------------------------

def install(accel_dir: str | None, slim_headers: bool) -> bool:
    """Wrap torch's ninja writer (and, for slim headers, its ninja run) in this process. False, with nothing
    changed, when neither hook has anything to offer."""
    offered = variants(accel_dir) if accel_dir else []
    if not offered and not slim_headers:
        return False
    import torch.utils.cpp_extension as ext

    write_original: Callable[..., Any] = ext._write_ninja_file
    signature = inspect.signature(write_original)

    def write_ninja_file(*args: Any, **kwargs: Any) -> Any:
        bound = signature.bind_partial(*args, **kwargs).arguments
        if offered:
            offer_pch(list(bound.get("cflags") or []), offered)
        if slim_headers and bound.get("with_cuda"):
            prepare_slim(Path(bound["path"]).parent, list(bound.get("cuda_cflags") or []),
                         [str(s) for s in bound.get("sources") or []])
        return write_original(*args, **kwargs)

    ext._write_ninja_file = write_ninja_file
    if slim_headers:
        run_original: Callable[..., Any] = ext._run_ninja_build

        def run_ninja_build(build_directory: str, verbose: bool, error_prefix: str) -> Any:
            return run_with_fallback(run_original, build_directory, verbose, error_prefix)

        ext._run_ninja_build = run_ninja_build
    return True
