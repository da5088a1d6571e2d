"""Inside the build child: two hooks on torch's extension build that make it faster and change nothing else.

Runs in the isolated compile child before the candidate is imported (sandbox/child/build/compile.py `compile_only`).
build.ninja itself is left exactly as torch writes it: the execution child, which runs the same load_inline
without these hooks, then finds every output up to date instead of rebuilding.

1. The precompiled torch/extension.h for main.cpp (`JUDGE_BUILD_ACCEL`, sandbox/build/accel.py). The hook
   looks at the flags main.cpp will be compiled with; when they equal those of a PCH variant in the read-only
   accelerator directory, it sets CPATH to that variant for the ninja run that follows, and clears it
   otherwise. Why CPATH: g++ searches CPATH after the command line's -I directories and before its -isystem
   ones, so the variant's `torch/extension.h.gch` is found just before torch's own header, and only by a
   compile that includes it; `gcc -E` (how nvcc preprocesses a .cu) ignores precompiled headers. A
   candidate that sets CPATH itself, or adds -I directories (which could shadow torch's headers), gets no PCH.
   main.cpp is offered the variant's subset PCH first (torch's headers without its C++ frontend, half the
   compile time), unless it names the frontend; if main.cpp fails to compile with it, CPATH is pointed at
   the full PCH and ninja runs again; and if main.cpp fails with the full PCH with the accelerator named in
   the compiler's output (its directory, a `.gch`, "precompiled"), ninja runs once more with no PCH at all,
   so compile errors are torch's own.

   What the compile sees is not the variant directory itself but a mirror of it in the extension's own build
   directory (`PCH_MIRROR`): the variant's `torch/extension.h` stub, copied, and a link to its `.gch`, made
   for each ninja run and removed after it. Why the stub: load_inline puts `#include <torch/extension.h>`
   first in main.cpp and most candidates include it again; g++ uses a PCH once, then looks for the header
   itself in the directory where it found the `.gch`, and fails if it is not there. The full PCH's stub sends
   that second include on to torch's own header (`#include_next`), which the PCH has already marked as read;
   the subset's stub is empty, so that the subset stands for the whole header at every include (a second
   include would otherwise parse the frontend the subset leaves out: more than the full PCH costs).
   Why a mirror: the stub, once read, is in ninja's record of main.cpp's headers, and the execution child
   has no accelerator directory; a header missing there would make its ninja compile main.cpp again (or,
   where it may not compile, refuse). The mirror's stub is in the build directory the execution child is
   given, so main.o stays up to date there. The link goes after each run: a build directory holds only
   plain files (sandbox/compile.audit). Otherwise ninja's record of main.cpp's headers is empty (g++ lists
   no header read from a PCH, and torch's are system headers).

2. Slim torch headers for the `.cu` (`JUDGE_SLIM_HEADERS`, sandbox/child/build/slim_headers.py). The hook writes them
   into the extension's build directory and points nvcc, and only nvcc, at them with `-I` in
   `NVCC_APPEND_FLAGS` for the ninja run. If a `.cu` fails to compile that way, the slim headers are removed
   and ninja runs again: the `.cu` is compiled against torch's own headers, as without the judge, and that
   run's outcome (success, or the compiler's errors) is the build's. Each decision is one `[judge]` line in
   the build log.

Both fallbacks are one wrapper around torch's ninja run (`run_with_fallbacks`): a failed run is retried once
per accelerator that the failure can be blamed on (the `.cu` object: the slim headers; main.o: the subset PCH,
then the full PCH). Not when no header can change the outcome (sandbox/child/build/retry_rule.unchangeable: every error
in the candidate's own main.cpp or .cu, none of the kinds a left-out declaration causes): a missing semicolon is
reported from the first compile, not after a second one against torch's full headers (60-65 s of nvcc).
"""

from __future__ import annotations

import inspect
import json
import os
import re
import shlex
import shutil
import sys
from pathlib import Path
from typing import Any, Callable

from sandbox.child.build import retry_rule
from sandbox.child.build import slim_headers
from sandbox.shared.accel_layout import (ACCELERATOR_WORDS, FLAGS_FILE, FRONTEND, FULL_NOT_BUILT, PCH_NAME, STUB_TEXT,
                                         SUBSET_DIR, SUBSET_STUB_TEXT, has_full, normalise, usable)

PCH_MIRROR = ".judge-pch"
"""Inside an extension's build directory: the directory CPATH names while ninja runs (see the module doc)."""
_OURS = "JUDGE_PCH_CPATH"
"""Remembers the CPATH value this hook set, to tell it from one the candidate set."""
_FULL = "JUDGE_PCH_FULL"
"""While main.cpp is offered the subset PCH: the full PCH's directory, main.cpp's fallback."""
RETRY_EVERY_FAILURE = "JUDGE_RETRY_EVERY_FAILURE"
"""Set to 1 in the build child's environment: every failure an accelerator could be blamed on is built again
without it, even one that `retry_rule.unchangeable` says no header changes (the differential test
tests/sandbox/test_compile_errors.py compares both)."""
NVCC_ENV = "NVCC_APPEND_FLAGS"
"""Flags nvcc appends to every command line (CUDA 11.5+); g++ never reads it, so main.cpp is untouched."""
_CU_OBJECT_FAILED = re.compile(r"^FAILED: .*\.cuda\.o\b", re.M)
"""ninja's line for a failed `.cu` compile (torch names a .cu's object `<stem>.cuda.o`)."""
_MAIN_OBJECT_FAILED = re.compile(r"^FAILED: (?:\[code=\d+\] )?(?:\S*/)?main\.o\b", re.M)
"""ninja's line for a failed main.cpp compile (load_inline's bindings file; its object is `main.o`); ninja 1.12
and later put the exit status first: `FAILED: [code=1] main.o`."""


def note(text: str) -> None:
    """One line in the build log (the parent keeps the child's stderr with the verdict)."""
    print(f"[judge] {text}", file=sys.stderr, flush=True)


# --- 1. the precompiled header for main.cpp -------------------------------------------------------------------

def variants(accel_dir: str) -> list[tuple[list[str], str]]:
    """(flags, directory) of each complete PCH variant offered to this build: one that this build's compiler
    can read (`compiler_mismatch`; a variant it cannot is a line in the build log instead)."""
    found = []
    root = Path(accel_dir)
    if not root.is_dir():
        return found
    for entry in sorted(root.iterdir()):
        if entry.name.startswith(".") or not usable(entry):
            continue
        try:
            record = json.loads((entry / FLAGS_FILE).read_text())
            flags = record["flags"]
        except (OSError, ValueError, KeyError):
            continue
        why = compiler_mismatch(record.get("compiler", ""))
        if why:
            note(f"the precompiled torch/extension.h in {entry} is not offered: {why}")
            continue
        found.append((flags, str(entry)))
    return found


def compiler_mismatch(built_with: str) -> str | None:
    """Why a PCH built with this compiler cannot serve this build's, or None. g++ rejects a PCH that another
    executable wrote and parses the header instead, silently: a judge whose CXX differs from the child's
    compiler has every PCH of its host rejected that way (docs/benchmarks.md). Checked here, in the child,
    against the compiler torch will run here, so that a mismatch is a line in the build log."""
    import torch.utils.cpp_extension as ext  # torch's extension builder: loaded where a build is hooked

    ours = shutil.which(ext.get_cxx_compiler()) or ext.get_cxx_compiler()
    theirs = shutil.which(built_with) or built_with
    if os.path.realpath(ours) != os.path.realpath(theirs):
        return f"it was built with {built_with}, this build compiles with {ours}"
    return None


def choose(cflags: list[str], offered: list[tuple[list[str], str]]) -> str | None:
    """The variant directory built with exactly these flags, if any."""
    tokens = normalise(cflags)
    if any(t.startswith(("-I", "-iquote", "-include", "-nostdinc", "-imacros")) for t in tokens):
        return None  # the candidate's own include paths come before CPATH and may shadow torch's headers
    for flags, directory in offered:
        if flags == tokens:
            return directory
    return None


def subset_of(variant_dir: str) -> str | None:
    """The variant's subset PCH directory, if it was built."""
    subset = Path(variant_dir) / SUBSET_DIR
    return str(subset) if (subset / PCH_NAME).is_file() else None


def frontend_named(main_cpp: str | None) -> str | None:
    """Why main.cpp should go straight to the full PCH ("names torch::nn::", "could not be read"), or None.
    A main.cpp that includes torch/extension.h a second time (load_inline wrote the first) is offered the subset like
    any other: the subset's stub stands for the whole header (accel_layout.SUBSET_STUB_TEXT)."""
    if main_cpp is None:
        return None
    try:
        text = Path(main_cpp).read_bytes()[:4 << 20].decode("utf-8", "replace")
    except OSError:
        return "could not be read"
    found = FRONTEND.search(text)
    return f"names {found.group(0)}" if found else None


def offer_pch(cflags: list[str], offered: list[tuple[list[str], str]], main_cpp: str | None = None,
              subset_first: bool = True) -> None:
    current = os.environ.get("CPATH")
    if current is not None and current != os.environ.get(_OURS):
        return  # the candidate's own CPATH: leave it alone
    os.environ.pop(_FULL, None)
    chosen = choose(cflags, offered)
    if not chosen:
        os.environ.pop("CPATH", None)
        os.environ.pop(_OURS, None)
        return
    subset = subset_of(chosen) if subset_first else None
    named = frontend_named(main_cpp) if subset else None
    if subset and not named:
        os.environ["CPATH"] = os.environ[_OURS] = subset
        os.environ[_FULL] = chosen
        note(f"main.cpp offered the precompiled torch/extension.h in {chosen}, "  # tests look for this line
             "first its subset without torch's C++ frontend")
        return
    why = f" (main.cpp {named})" if named else ""
    if not has_full(chosen):
        os.environ.pop("CPATH", None)
        os.environ.pop(_OURS, None)
        note(f"main.cpp builds with torch's own torch/extension.h{why}: {FULL_NOT_BUILT} ({chosen})")
        return
    os.environ["CPATH"] = os.environ[_OURS] = chosen
    note(f"main.cpp offered the precompiled torch/extension.h in {chosen}{why}")  # tests look for this line


def full_pch_instead() -> bool:
    """After main.cpp failed with the subset PCH: point CPATH at the full one, or clear it (torch's own header)
    while the full one is not built yet. False when main.cpp was not offered the subset."""
    full = os.environ.pop(_FULL, None)
    if full is None or os.environ.get("CPATH") != os.environ.get(_OURS):
        return False
    if not has_full(full):
        os.environ.pop("CPATH")
        os.environ.pop(_OURS)
        note(f"{FULL_NOT_BUILT} ({full}): main.cpp gets torch's own")
        return True
    os.environ["CPATH"] = os.environ[_OURS] = full
    return True


def no_pch_instead() -> bool:
    """After main.cpp failed with the full PCH: no PCH at all (CPATH cleared). False when none was offered."""
    if os.environ.get(_FULL) is not None or "CPATH" not in os.environ or os.environ["CPATH"] != os.environ.get(_OURS):
        return False
    os.environ.pop("CPATH")
    os.environ.pop(_OURS)
    return True


def mirror_pch(build_directory: Path) -> Path | None:
    """Point CPATH at this extension's mirror of the offered PCH directory (see the module doc): the stub as a
    plain file, the `.gch` as a link. The mirror's path, so that `unmirror_pch` can undo it; None when no PCH
    is offered (or the mirror cannot be written: then the compile reads the variant directory itself)."""
    offered = os.environ.get(_OURS)
    if offered is None or os.environ.get("CPATH") != offered:
        return None
    subset = os.environ.get(_FULL) is not None
    mirror = build_directory / PCH_MIRROR / ("subset" if subset else "full")
    text = SUBSET_STUB_TEXT if subset else STUB_TEXT
    try:
        (mirror / "torch").mkdir(parents=True, exist_ok=True)
        stub = mirror / "torch" / "extension.h"
        if not stub.is_file() or stub.read_text() != text:
            stub.unlink(missing_ok=True)
            stub.write_text(text)
        link = mirror / PCH_NAME
        link.unlink(missing_ok=True)
        link.symlink_to(Path(offered) / PCH_NAME)
    except OSError as exc:
        note(f"{build_directory.name}: the precompiled header is read from {offered} itself ({exc})")
        return None
    os.environ["CPATH"] = str(mirror)
    return mirror


def unmirror_pch(mirror: Path | None) -> None:
    """Remove the mirror's link (the stub stays: ninja's record of main.cpp may name it) and point CPATH back at
    the offered directory, where the hook's state expects it."""
    if mirror is None:
        return
    (mirror / PCH_NAME).unlink(missing_ok=True)
    if os.environ.get("CPATH") == str(mirror):
        os.environ["CPATH"] = os.environ[_OURS]


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


def run_with_fallbacks(original: Callable[..., Any], build_directory: str, verbose: bool, error_prefix: str) -> Any:
    """torch's ninja run with the accelerators offered; again without the one a failure is blamed on.

    The `.cu` object failed: the slim headers are removed and nvcc is no longer pointed at them. main.o
    failed under the subset PCH: main.cpp gets the full PCH; under the full PCH, with the accelerator named in
    the output (`ACCELERATOR_WORDS`): main.cpp gets no PCH. A failure that is none of these (the link, or a
    compile that already had torch's own headers) is the build's, raised as torch raised it. Each accelerator
    is given up at most once, so ninja runs at most four times; what compiled before a failure is kept."""
    directory = Path(build_directory)
    while True:
        slim = (directory / slim_headers.SLIM_DIR / slim_headers.SLIM_HEADER).is_file()
        subset = os.environ.get(_FULL) is not None
        theirs = os.environ.get(NVCC_ENV)
        if slim:
            os.environ[NVCC_ENV] = (f"{theirs} " if theirs else "") + f"-I{directory / slim_headers.SLIM_DIR}"
        mirror = mirror_pch(directory)
        try:
            result = original(build_directory, verbose, error_prefix)
            if slim:
                note(f"{directory.name}: .cu built against the slim torch headers "
                     "(sandbox/child/build/slim_headers.py)")
            if subset:
                os.environ.pop(_FULL, None)
                note(f"{directory.name}: main.cpp built with the subset of torch/extension.h")
            return result
        except RuntimeError as exc:
            unmirror_pch(mirror)  # the fallbacks below read and set CPATH as offer_pch left it
            log, retry = str(exc), False
            if (((slim and _CU_OBJECT_FAILED.search(log)) or (subset and _MAIN_OBJECT_FAILED.search(log)))
                    and not ACCELERATOR_WORDS.search(log) and os.environ.get(RETRY_EVERY_FAILURE) != "1"):
                final = retry_rule.unchangeable(log, directory)
                if final:
                    note(f"{directory.name}: not built again with fuller headers: {final}")
                    raise
            if slim and _CU_OBJECT_FAILED.search(log):
                note(f"{directory.name}: .cu needs torch's full headers (slim build: {slim_headers.first_error(log)}); "
                     "building it again with them")
                slim_headers.remove(directory)
                retry = True
            if subset and _MAIN_OBJECT_FAILED.search(log) and full_pch_instead():
                note(f"{directory.name}: main.cpp needs more of torch/extension.h than its subset (subset build: "
                     f"{slim_headers.first_error(log)}); building it again with all of it")
                retry = True
            elif (not subset and _MAIN_OBJECT_FAILED.search(log) and ACCELERATOR_WORDS.search(log)
                  and no_pch_instead()):
                note(f"{directory.name}: main.cpp failed with the precompiled torch/extension.h in its way "
                     f"({slim_headers.first_error(log)}); building it again without a precompiled header")
                retry = True
            if not retry:
                raise
        finally:
            unmirror_pch(mirror)
            if slim and theirs is None:
                os.environ.pop(NVCC_ENV, None)
            elif slim:
                os.environ[NVCC_ENV] = theirs


# --- installing both -------------------------------------------------------------------------------------------

def install(accel_dir: str | None, slim_headers: bool, pch_subset: bool = True) -> bool:
    """Wrap torch's ninja writer and its ninja run (for the fallbacks) in this process. False, with nothing
    changed, when neither hook has anything to offer."""
    offered = variants(accel_dir) if accel_dir else []
    if not offered and not slim_headers:
        return False
    import torch.utils.cpp_extension as ext  # torch's extension builder: loaded where a build is hooked

    write_original: Callable[..., Any] = ext._write_ninja_file
    signature = inspect.signature(write_original)

    def write_ninja_file(*args: Any, **kwargs: Any) -> Any:
        bound = signature.bind_partial(*args, **kwargs).arguments
        if offered:
            sources = [str(source) for source in bound.get("sources") or []]
            main_cpp = next((source for source in sources if Path(source).name == "main.cpp"), None)
            offer_pch(list(bound.get("cflags") or []), offered, main_cpp, subset_first=pch_subset)
        if slim_headers and bound.get("with_cuda"):
            prepare_slim(Path(bound["path"]).parent, list(bound.get("cuda_cflags") or []),
                         [str(s) for s in bound.get("sources") or []])
        return write_original(*args, **kwargs)

    ext._write_ninja_file = write_ninja_file
    run_original: Callable[..., Any] = ext._run_ninja_build

    def run_ninja_build(build_directory: str, verbose: bool, error_prefix: str) -> Any:
        return run_with_fallbacks(run_original, build_directory, verbose, error_prefix)

    ext._run_ninja_build = run_ninja_build
    return True
