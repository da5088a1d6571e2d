"""The house's rules, read from the source with `ast`: the trust boundary in the rooms of `sandbox/`, and modules and
functions a person can hold in their head.

- `sandbox/child/` is what runs in a process the candidate's code shares. It imports, of the judge, only the wire
  format (`sandbox.protocol`), the pure code both sides share (`sandbox/shared/`) and its own room; `sandbox/shared/`
  imports only itself and the protocol. No module outside `sandbox/child/` imports from it (the parent starts a child
  by its module's name, a string), with one exception named below.
- No module over `MAX_MODULE_LINES` lines and no function over `MAX_FUNCTION_LINES` lines under `SIZED_ROOTS`.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SANDBOX = ROOT / "sandbox"

SIZED_ROOTS = ("sandbox", "service")
"""Trees whose modules and functions are held to the limits below (database migrations aside: each is one
revision's steps, written once and never read together)."""
MAX_MODULE_LINES = 500
MAX_FUNCTION_LINES = 60
"""A function's lines from its `def` to its last line, docstring and nested functions included."""

CHILD, SHARED = "sandbox.child", "sandbox.shared"
CHILD_MAY_IMPORT = ("sandbox.protocol", SHARED, CHILD)
SHARED_MAY_IMPORT = ("sandbox.protocol", SHARED)
IMPORTERS_OF_THE_CHILD = {
    "sandbox.execution.measure_baselines":
        "a trusted process of its own that times the reference with the child's own loop (sandbox/child/timing.py), "
        "so that candidates and baselines are timed alike; never imported by the judge's process",
}
BOUNDARY_ROOTS = ("sandbox", "service")
"""Where no module may import the child's room."""


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports_of(path: Path) -> set[str]:
    """Every module an import statement of the file names, at any depth (a function's imports count too)."""
    name, found = module_name(path), set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                package = name if path.name == "__init__.py" else name.rpartition(".")[0]
                for _ in range(node.level - 1):
                    package = package.rpartition(".")[0]
                base = f"{package}.{base}" if base else package
            found |= {f"{base}.{alias.name}" for alias in node.names} if base in ("sandbox", CHILD, SHARED) else {base}
    return found


def _within(module: str, rooms: tuple[str, ...]) -> bool:
    return any(module == room or module.startswith(f"{room}.") for room in rooms)


def _python_files(*roots: str) -> list[Path]:
    return [path for root in roots for path in sorted((ROOT / root).rglob("*.py"))]


def test_the_import_reader_resolves_relative_and_package_imports() -> None:
    path = SANDBOX / "child" / "harness.py"
    found = imports_of(path)
    assert {"sandbox.protocol", "sandbox.child.audit", "sandbox.shared.compare", "torch"} <= found


@pytest.mark.parametrize("path", _python_files("sandbox/child", "sandbox/shared"),
                         ids=lambda p: str(p.relative_to(ROOT)))
def test_the_child_and_shared_rooms_import_only_what_they_may(path: Path) -> None:
    allowed = CHILD_MAY_IMPORT if _within(module_name(path), (CHILD,)) else SHARED_MAY_IMPORT
    bad = sorted(m for m in imports_of(path)
                 if (_within(m, ("sandbox",)) and not _within(m, allowed)) or _within(m, ("service",)))
    assert bad == [], f"{path.relative_to(ROOT)} imports {bad}: only {allowed} of the judge"


def test_nothing_outside_the_child_imports_it() -> None:
    found = {module_name(path): sorted(m for m in imports_of(path) if _within(m, (CHILD,)))
             for path in _python_files(*BOUNDARY_ROOTS) if not _within(module_name(path), (CHILD,))}
    found = {name: targets for name, targets in found.items() if targets}
    assert set(found) == set(IMPORTERS_OF_THE_CHILD), f"modules outside sandbox/child/ import it: {found}"


@pytest.mark.parametrize("path", [p for p in _python_files(*SIZED_ROOTS) if "migrations" not in p.parts],
                         ids=lambda p: str(p.relative_to(ROOT)))
def test_modules_and_functions_stay_small(path: Path) -> None:
    source = path.read_text()
    lines = len(source.splitlines())
    long = [f"{node.name} (line {node.lineno}): {node.end_lineno - node.lineno + 1} lines"
            for node in ast.walk(ast.parse(source))
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
            and node.end_lineno - node.lineno + 1 > MAX_FUNCTION_LINES]
    assert lines <= MAX_MODULE_LINES, f"{lines} lines: split it along a seam"
    assert long == [], f"functions over {MAX_FUNCTION_LINES} lines"
