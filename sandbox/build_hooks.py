"""Inside the build child: point g++ at the judge's precompiled torch/extension.h when it fits exactly.

Runs in the isolated compile child before the candidate is imported (sandbox/child.py `compile_only`). It
wraps torch's ninja-file writer only to look at the flags main.cpp will be compiled with; when they equal
those of a PCH variant in the read-only accelerator directory (sandbox/build_accel.py), it sets CPATH to
that variant for the ninja run that follows, and clears it otherwise. build.ninja itself is left exactly as
torch writes it: the execution child, which runs the same load_inline without this hook, then finds every
output up to date instead of rebuilding.

Why CPATH: g++ searches CPATH after the command line's -I directories and before its -isystem ones, so the
variant's `torch/extension.h.gch` is found just before torch's own header, and only by a compile that
includes it; `gcc -E` (how nvcc preprocesses a .cu) ignores precompiled headers. A candidate that sets CPATH
itself, or adds -I directories (which could shadow torch's headers), gets no PCH.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any, Callable

from sandbox.build_accel import FLAGS_FILE, PCH_NAME, normalise

_OURS = "JUDGE_PCH_CPATH"
"""Remembers the CPATH value this hook set, to tell it from one the candidate set."""


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


def install(accel_dir: str) -> bool:
    """Wrap torch's ninja writer in this process. False (and nothing changed) when nothing is offered."""
    offered = variants(accel_dir)
    if not offered:
        return False
    import torch.utils.cpp_extension as ext

    original: Callable[..., Any] = ext._write_ninja_file

    def write_ninja_file(*args: Any, **kwargs: Any) -> Any:
        cflags = kwargs.get("cflags", args[1] if len(args) > 1 else None)
        current = os.environ.get("CPATH")
        if current is None or current == os.environ.get(_OURS):
            chosen = choose(list(cflags or []), offered)
            if chosen:
                os.environ["CPATH"] = os.environ[_OURS] = chosen
                # One line in the build log: says which PCH the compile was offered (tests look for it).
                print(f"[judge] main.cpp offered the precompiled torch/extension.h in {chosen}", file=sys.stderr)
            else:
                os.environ.pop("CPATH", None)
                os.environ.pop(_OURS, None)
        return original(*args, **kwargs)

    ext._write_ninja_file = write_ninja_file
    return True
