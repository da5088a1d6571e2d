"""Static checks on the candidate's AST, before anything of it runs.

What this catches: a missing ModelNew, references to the task's forbidden operators through any alias
(`import torch.nn.functional as F; F.kl_div`, `from torch.nn.functional import kl_div as k`,
`getattr(F, "kl_" + "div")`, `torch.ops.aten.kl_div`), and imports of the judge's own packages. What it
cannot catch (strings built at run time, `exec`) is left to the run-time tripwires in the child.
"""

from __future__ import annotations

import ast
import sys
from dataclasses import dataclass, field

JUDGE_PACKAGES = ("reference", "sandbox", "service")
"""A candidate importing these is reaching for the reference or the harness."""


@dataclass(frozen=True)
class Finding:
    rule: str
    message: str
    line: int | None = None


@dataclass
class StaticReport:
    imports: list[str] = field(default_factory=list)
    findings: list[Finding] = field(default_factory=list)
    dynamic_code: list[str] = field(default_factory=list)
    """Uses of exec/eval/compile/__import__: not forbidden, noted so the run-time checks matter."""


def _const_str(node: ast.AST) -> str | None:
    """Fold string constants and their concatenations ("kl_" + "div"); None if not constant."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        left, right = _const_str(node.left), _const_str(node.right)
        if left is not None and right is not None:
            return left + right
    if isinstance(node, ast.JoinedStr) and all(isinstance(v, ast.Constant) for v in node.values):
        return "".join(str(v.value) for v in node.values)  # type: ignore[attr-defined]
    return None


class _Resolver(ast.NodeVisitor):
    """Resolves names and attribute chains to fully qualified names through import aliases."""

    def __init__(self) -> None:
        self.aliases: dict[str, str] = {}
        self.imports: list[str] = []
        self.references: list[tuple[str, int]] = []
        self.getattr_strings: list[tuple[str, int]] = []
        self.dynamic: list[str] = []
        self.has_model_new = False
        self.model_new_has_forward = False

    def visit_Import(self, node: ast.Import) -> None:
        for alias in node.names:
            self.imports.append(alias.name)
            if alias.asname:
                self.aliases[alias.asname] = alias.name
            else:
                top = alias.name.split(".")[0]
                self.aliases[top] = top
            self.references.append((alias.name, node.lineno))

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        module = node.module or ""
        self.imports.append(module)
        for alias in node.names:
            qualified = f"{module}.{alias.name}" if module else alias.name
            self.aliases[alias.asname or alias.name] = qualified
            self.references.append((qualified, node.lineno))

    def qualify(self, node: ast.AST) -> str | None:
        if isinstance(node, ast.Name):
            return self.aliases.get(node.id, node.id)
        if isinstance(node, ast.Attribute):
            base = self.qualify(node.value)
            return f"{base}.{node.attr}" if base else None
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "getattr":
            if len(node.args) >= 2:
                base, attr = self.qualify(node.args[0]), _const_str(node.args[1])
                if base and attr:
                    return f"{base}.{attr}"
        return None

    def visit_Attribute(self, node: ast.Attribute) -> None:
        name = self.qualify(node)
        if name:
            self.references.append((name, node.lineno))
        self.generic_visit(node)

    def visit_Name(self, node: ast.Name) -> None:
        if node.id in self.aliases:
            self.references.append((self.aliases[node.id], node.lineno))

    def visit_Call(self, node: ast.Call) -> None:
        if isinstance(node.func, ast.Name):
            if node.func.id == "getattr" and len(node.args) >= 2:
                attr = _const_str(node.args[1])
                if attr is not None:
                    self.getattr_strings.append((attr, node.lineno))
                    name = self.qualify(node)
                    if name:
                        self.references.append((name, node.lineno))
            if node.func.id in {"exec", "eval", "compile", "__import__"}:
                self.dynamic.append(f"{node.func.id} (line {node.lineno})")
        name = self.qualify(node.func)
        if name in {"importlib.import_module", "builtins.__import__"} and node.args:
            module = _const_str(node.args[0])
            if module:
                self.imports.append(module)
                self.references.append((module, node.lineno))
        self.generic_visit(node)

    def visit_ClassDef(self, node: ast.ClassDef) -> None:
        if node.name == "ModelNew":
            self.has_model_new = True
            self.model_new_has_forward = any(
                isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)) and item.name == "forward"
                for item in node.body
            )
        self.generic_visit(node)


def _aten_python_names(aten_ops: frozenset[str]) -> set[str]:
    """aten::kl_div -> torch.ops.aten.kl_div (the Python path to the same operator)."""
    return {"torch.ops.aten." + op.split("::", 1)[1] for op in aten_ops if op.startswith("aten::")}


def check_source(source: str, forbidden_names: frozenset[str], forbidden_aten_ops: frozenset[str]) -> StaticReport:
    """Parse and check; raises SyntaxError for unparsable source (the caller turns that into a verdict)."""
    tree = ast.parse(source)
    resolver = _Resolver()
    resolver.visit(tree)
    report = StaticReport(imports=sorted(set(resolver.imports)), dynamic_code=resolver.dynamic)

    if not resolver.has_model_new:
        report.findings.append(Finding("missing_model_new", "the module does not define class ModelNew"))
    elif not resolver.model_new_has_forward:
        report.findings.append(Finding("missing_forward", "class ModelNew does not define forward()"))

    forbidden = set(forbidden_names) | _aten_python_names(forbidden_aten_ops)
    short_names = {name.rsplit(".", 1)[-1] for name in forbidden}
    seen: set[str] = set()
    for name, line in resolver.references:
        for bad in forbidden:
            if (name == bad or name.startswith(bad + ".")) and bad not in seen:
                seen.add(bad)
                report.findings.append(Finding("forbidden_operator", f"references {bad} (as {name})", line))
        top = name.split(".")[0]
        if top in JUDGE_PACKAGES and top not in seen and top not in sys.builtin_module_names:
            seen.add(top)
            report.findings.append(Finding("judge_import", f"imports the judge's own package {top!r} ({name})", line))
    for attr, line in resolver.getattr_strings:
        if attr in short_names and attr not in seen:
            seen.add(attr)
            report.findings.append(Finding("forbidden_operator",
                                           f"getattr(..., {attr!r}) reaches a forbidden operator", line))
    return report
