"""In the build child: may a build without the accelerator end otherwise? (`unchangeable`, asked by
sandbox/child/build/hooks.py before it builds again without the slim headers or the subset PCH; the reasons are in
sandbox/build/errors.py's docstring.)
"""

from __future__ import annotations

import os
from pathlib import Path

from sandbox.shared.compile_log import _FAILED, _LOCATED, _SEVERITY, UNKNOWN_NAME_SYNTAX, Located, located


def unchangeable(log: str, directory: Path) -> str | None:
    """Why building again with fuller headers cannot change this failed ninja run's outcome, or None when it might.

    It cannot when every failed compile (`FAILED: x.o`) reports at least one error, every error line is read, and
    each sits in a source of the extension's own `directory` (main.cpp, cuda.cu: the candidate's text) and is
    neither of the `undeclared` kind nor a syntax error an unknown name causes (`UNKNOWN_NAME_SYNTAX`). The
    caller checks the accelerators' own words separately (sandbox/child/build/hooks.ACCELERATOR_WORDS)."""
    sections = _failed_compiles(log)
    if not sections:
        return None
    errors: list[Located] = []
    for section in sections:
        found = located(section)
        reported = [ln for ln in section.splitlines()[1:] if _SEVERITY.search(ln)]
        if not found or len(reported) != len(_LOCATED.findall(section)):
            return None  # a compile that failed without a readable error (killed, a driver's own error)
        errors += found
    for error in errors:
        if not _own_source(error.path, directory):
            return None
        if error.kind == "undeclared" or UNKNOWN_NAME_SYNTAX.search(error.message):
            return None
    first = errors[0]
    return (f"{len(errors)} error(s) in the candidate's own source, none of a kind that fuller headers change "
            f"(first: {first.location}: {first.message[:160]})")


def _failed_compiles(log: str) -> list[str]:
    """The output of each failed compile in a ninja log: from its FAILED line to the next one."""
    marks = [m for m in _FAILED.finditer(log) if m.group("target").endswith(".o")]
    ends = [m.start() for m in marks[1:]] + [len(log)]
    return [log[m.start():end] for m, end in zip(marks, ends)]


def _own_source(path: str, directory: Path) -> bool:
    """Whether `path` (as the compiler named it) is a source file directly in the extension's build directory."""
    where = Path(os.path.normpath(path if os.path.isabs(path) else directory / path))
    return where.parent == Path(os.path.normpath(directory)) and where.suffix in (".cpp", ".cu", ".cc", ".cxx")
