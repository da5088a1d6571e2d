"""What the build stage hands the execution stage: a candidate that is checked and built (`prepare` makes it,
sandbox/pipeline.py; `execute` runs it, sandbox/execution/run.py)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from reference import TaskId


@dataclass(frozen=True, kw_only=True)
class PreparedCandidate:
    """A candidate that passed extraction and static checks and whose extensions are built."""

    task_id: TaskId
    source: str
    """The extracted Python module defining ModelNew."""
    code_sha256: str
    """sha256 of `source`, the extracted code (the raw text's is a submission's `text_sha256`)."""
    build_key: str
    """sha256 of (source, toolchain): names the build directory; equal keys are compiled once."""
    build_dir: Path
    """The candidate's build directory (its /build when it was built): written by candidate code, never trusted."""
    source_path: Path
    """The checked source, judge-owned, outside build_dir: what a child must import (sandbox/build/compiler.py)."""
    toolchain: str
    target: str
    """"cpu" or "cuda": what the extensions were built for."""
    imports: list[str] = field(default_factory=list)
    stages: dict[str, float] = field(default_factory=dict)
    compile_log: str = ""
    compile_cached: bool = False
    build_id: str = ""
    """Which stored build of `build_key` this is (sandbox/build/compiler.py `BuildResult.build_id`)."""
    build_advice: str | None = None
    """How to make this candidate's build fast, when its .cu or main.cpp needed torch's full headers
    (sandbox/build/advice.py)."""
