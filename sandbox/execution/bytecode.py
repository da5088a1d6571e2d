"""Whether the modules a judge child imports have bytecode caches it can read.

The child runs `python -B` under a read-only root (sandbox/supervisor.py, sandbox/isolation.py): it never
writes a `.pyc`, so a module without one is compiled from source on every start. On the H100 image
(2026-11-25) none of torch's, sympy's or numpy's 4,000 modules had one: a spare's CPU-only start took 7.3-7.7 s
alone and 10-11 s three at a time; after `python -m compileall` over the same directories, 2.9-3.5 s
(docs/benchmarks.md). `pip install` writes the caches by default; an image built with `--no-compile`, or
packages copied in without them, pays this on every candidate. `WarmPool` checks once and warns.
"""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass
from pathlib import Path

CHILD_PACKAGES = ("torch", "sympy", "numpy", "pydantic")
"""The largest packages a child imports before any candidate code (torch, torch._dynamo, the protocol)."""
WARN_BELOW = 0.9
"""A share of cached modules under this is a deployment without caches, not a few new files."""


@dataclass(frozen=True, kw_only=True)
class Coverage:
    package: str
    root: Path
    modules: int
    cached: int

    @property
    def share(self) -> float:
        return self.cached / self.modules if self.modules else 1.0


def coverage(package: str) -> Coverage | None:
    """How many of the package's modules have a current-interpreter `.pyc` beside them (None: not installed)."""
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        return None
    root = Path(next(iter(spec.submodule_search_locations)))
    sources = list(root.rglob("*.py"))
    cached = sum(1 for source in sources if Path(importlib.util.cache_from_source(str(source))).exists())
    return Coverage(package=package, root=root, modules=len(sources), cached=cached)


def missing_caches(packages: tuple[str, ...] = CHILD_PACKAGES) -> list[Coverage]:
    """The packages whose modules mostly lack bytecode caches."""
    found = (coverage(package) for package in packages)
    return [c for c in found if c is not None and c.share < WARN_BELOW]


def advice(missing: list[Coverage]) -> str:
    """What to tell an operator: which packages, what it costs, the command that fixes it."""
    listed = ", ".join(f"{c.package} ({c.cached}/{c.modules} cached)" for c in missing)
    roots = " ".join(sorted({str(c.root.parent) for c in missing}))
    return (f"modules the judge's children import have no bytecode caches: {listed}. Each child compiles them "
            f"from source on every start (about 2.5x slower starts on an H100 host): run "
            f"`python -m compileall -q -j 0 {roots}` once where they are installed")
