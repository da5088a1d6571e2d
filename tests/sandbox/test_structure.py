"""The shape of `sandbox/`, read from its source with `ast`: no import circle between its modules, no module-level
import of `service` (the judge must run without the service), and no entry module (one that runs as `__main__`)
imported by another module of the judge, which would make a second copy of it in the process that runs it.

Module-level imports are the ones that run when a module is imported: those at the top, and inside top-level
`if`/`try` blocks, except `if TYPE_CHECKING:` (annotations only, never run). An import inside a function runs
when the function does; `test_function_level_imports_say_why` asks each one for its reason.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SANDBOX = REPO / "sandbox"


def module_name(path: Path, root: Path = REPO) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def modules(root: Path = SANDBOX) -> dict[str, Path]:
    return {module_name(path, root.parent): path for path in sorted(root.rglob("*.py"))}


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def module_level_imports(tree: ast.Module) -> list[ast.Import | ast.ImportFrom]:
    """Imports that run when the module is imported (top level, and in top-level if/try/with blocks)."""
    found: list[ast.Import | ast.ImportFrom] = []
    pending: list[ast.stmt] = list(tree.body)
    while pending:
        node = pending.pop(0)
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            found.append(node)
        elif isinstance(node, ast.If):
            pending += node.orelse if _is_type_checking(node.test) else [*node.body, *node.orelse]
        elif isinstance(node, ast.Try):
            pending += [*node.body, *node.orelse, *node.finalbody, *(s for h in node.handlers for s in h.body)]
        elif isinstance(node, ast.With):
            pending += node.body
    return found


def imported_names(node: ast.Import | ast.ImportFrom, importer: str, is_package: bool,
                   known: set[str] | dict[str, Path] = frozenset()) -> list[str]:
    """The absolute module names an import statement imports: `from a import b` names the module `a.b` where
    there is one, else `a` (b is then a name defined in a). The packages above a module, which Python imports
    first, are not counted: `sandbox/__init__.py` re-exports the pipeline and is run before any of its modules."""
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names]
    base = node.module or ""
    if node.level:
        package = importer if is_package else importer.rpartition(".")[0]
        for _ in range(node.level - 1):
            package = package.rpartition(".")[0]
        base = f"{package}.{base}" if base else package
    return sorted({f"{base}.{alias.name}" if f"{base}.{alias.name}" in known else base for alias in node.names})


def import_graph(root: Path = SANDBOX) -> dict[str, set[str]]:
    """Module -> the modules of the same tree it imports at module level."""
    known = modules(root)
    graph: dict[str, set[str]] = {}
    for name, path in known.items():
        edges: set[str] = set()
        for node in module_level_imports(ast.parse(path.read_text(), str(path))):
            for target in imported_names(node, name, path.name == "__init__.py", known):
                if target in known and target != name:
                    edges.add(target)
        graph[name] = edges
    return graph


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import circle as [a, b, ..., a], or None."""
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                return [*stack[stack.index(nxt):], nxt]
            if nxt not in state and (cycle := visit(nxt)):
                return cycle
        stack.pop()
        state[node] = 2
        return None

    for start in sorted(graph):
        if start not in state and (cycle := visit(start)):
            return cycle
    return None


def test_the_scan_reads_the_real_tree() -> None:
    graph = import_graph()
    assert len(graph) > 30
    assert {"sandbox.execution.run", "sandbox.build.compiler", "sandbox.child.harness"} <= set(graph)
    assert "sandbox.execution.phases" in graph["sandbox.execution.run"]


def test_the_cycle_finder_finds_a_circle_and_only_one() -> None:
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b", "c"}, "b": {"c"}, "c": set()}) is None


def test_type_checking_imports_and_function_imports_are_not_module_level() -> None:
    tree = ast.parse("from typing import TYPE_CHECKING\nimport os\nif TYPE_CHECKING:\n    import a\nelse:\n"
                     "    import b\ntry:\n    import c\nexcept ImportError:\n    import d\ndef f():\n    import e\n")
    names = [alias.name for node in module_level_imports(tree) for alias in node.names]
    assert names == ["TYPE_CHECKING", "os", "b", "c", "d"]


def test_no_import_circle_between_sandbox_modules() -> None:
    cycle = find_cycle(import_graph())
    assert cycle is None, f"import circle: {' -> '.join(cycle or [])}"


def test_sandbox_imports_no_service_module_at_module_level() -> None:
    found = [f"{name}: {target}" for name, path in modules().items()
             for node in module_level_imports(ast.parse(path.read_text()))
             for target in imported_names(node, name, path.name == "__init__.py")
             if target == "service" or target.startswith("service.")]
    assert found == [], f"the judge must not import the service: {found}"


def _is_entry(tree: ast.Module) -> bool:
    """Whether the module runs as `__main__` (a `__main__.py`, or an `if __name__ == "__main__":` block)."""
    return any(isinstance(node, ast.If) and isinstance(node.test, ast.Compare)
               and isinstance(node.test.left, ast.Name) and node.test.left.id == "__name__" for node in tree.body)


def test_entry_modules_are_never_imported_by_the_judge() -> None:
    """An entry module imported by another module of the judge would be two copies in the process that runs it
    (`__main__` and its own name): another class of each exception, objects Integrity does not watch. The
    nvcc driver (build/nvcc_split.py) is run by its file path, outside the package, so it is imported freely; the
    shared headers' builder (build/warm.py) is a library whose `python -m` is an operator's convenience."""
    entries = {name for name, path in modules().items()
               if path.name == "__main__.py" or _is_entry(ast.parse(path.read_text()))}
    assert {"sandbox.child.__main__", "sandbox.execution.measure_baselines"} <= entries
    libraries = {"sandbox.build.nvcc_split", "sandbox.build.warm"}
    importers = {name: sorted(targets & (entries - libraries)) for name, targets in import_graph().items()}
    assert {name: found for name, found in importers.items() if found} == {}


def _function_imports(tree: ast.Module, source: list[str]) -> list[tuple[int, str]]:
    found = []
    for func in ast.walk(tree):
        if isinstance(func, (ast.FunctionDef, ast.AsyncFunctionDef)):
            for node in ast.walk(func):
                if isinstance(node, (ast.Import, ast.ImportFrom)):
                    found.append((node.lineno, source[node.lineno - 1]))
    return found


@pytest.mark.parametrize("path", sorted(SANDBOX.rglob("*.py")), ids=lambda p: str(p.relative_to(REPO)))
def test_function_level_imports_say_why(path: Path) -> None:
    """An import inside a function is there for a reason the line states (a heavy or optional module loaded only
    where it is used), never to break an import circle: every one carries a `#` comment on its line or the line
    before, and none imports a module of the judge."""
    source = path.read_text().splitlines()
    bad = []
    for line_no, line in _function_imports(ast.parse("\n".join(source)), source):
        judge = " sandbox" in line or line.strip().startswith("import sandbox")
        said = "#" in line or source[line_no - 2].strip().startswith("#")
        if judge or not said:
            bad.append(f"{line_no}: {line.strip()}")
    assert bad == []
