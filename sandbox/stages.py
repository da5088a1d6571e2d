"""The one stage timer of the judge: `prepare` (sandbox/pipeline.py) and `execute` (sandbox/execution/) time
each of their stages with it, into a Verdict's `stages` (wall seconds) and, where asked, the judge's own CPU
seconds beside them (`details.cost.parent_cpu_s`)."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator


@contextlib.contextmanager
def timed(stages: dict[str, float], name: str, cpu_s: dict[str, float] | None = None) -> Iterator[None]:
    """Add the block's wall seconds to `stages[name]` (and this process's CPU seconds to `cpu_s[name]`) when it
    ends, by an exception too. A value built inside the block (a Verdict returned from it) sees the stages before
    this one only: pydantic copies `stages` when it validates it."""
    wall, cpu = time.monotonic(), time.process_time()
    try:
        yield
    finally:
        stages[name] = stages.get(name, 0.0) + time.monotonic() - wall
        if cpu_s is not None:
            cpu_s[name] = cpu_s.get(name, 0.0) + time.process_time() - cpu
