"""Static checks on the candidate's AST, before anything of it runs.

What this catches: a missing ModelNew, references to the task's forbidden operators through any alias
(`import torch.nn.functional as F; F.kl_div`, `from torch.nn.functional import kl_div as k`,
`getattr(F, "kl_" + "div")`, `torch.ops.aten.kl_div`), imports of the judge's own packages, and imports
that cannot succeed here: a kernel language this host cannot run (TileLang, CuTe DSL, ...), anywhere in the
module, or any other package that is not installed, imported at the top of the module. Those would end in
ModuleNotFoundError only after the candidate had been given the device. What it cannot catch (strings built
at run time, `exec`) is left to the run-time tripwires in the child.
"""

from __future__ import annotations

import ast
import sys
from dataclasses import dataclass, field

from sandbox.shared import languages

JUDGE_PACKAGES = ("reference", "sandbox", "service")
"""A candidate importing these is reaching for the reference or the harness."""

KERNEL_LANGUAGES = {
    "tilelang": "TileLang",
    "cutlass": "CuTe DSL / CUTLASS Python",
    "thunderkittens": "ThunderKittens",
    "jax": "JAX / Pallas",
    "cupy": "CuPy",
    "numba": "Numba",
    "pycuda": "PyCUDA",
    "cuda": "CUDA Python (cuda-python)",
    "mojo": "Mojo",
    "max": "Mojo MAX",
    "warp": "NVIDIA Warp",
    "taichi": "Taichi",
    "tvm": "Apache TVM",
    "tvm_ffi": "Apache TVM FFI (its cpp.load_inline builds C++ and CUDA)",
    "hidet": "Hidet",
    "helion": "Helion",
    "triton": "Triton",
}
"""Top-level modules of kernel languages, by the name people know them by. The list only names them: whether
one can be judged is whether it imports here (`importable`), so installing TileLang in the judge's environment
makes TileLang candidates judgeable with no change to this file."""

IMPORT_ERRORS = frozenset({"ImportError", "ModuleNotFoundError", "Exception", "BaseException"})
"""Handlers that catch a failed import: an import in the `try` body of one of these is a guarded optional
import (the candidate falls back to something else), not a certain failure."""


def importable(module: str) -> bool:
    """Whether `module`'s top-level package is installed here (sandbox/shared/languages.py `installed`)."""
    return languages.installed(module)


def supported_languages() -> list[str]:
    """What this host judges, for a diagnosis: every kernel language installed here (sandbox/shared/languages.py),
    and PyTorch operators around them."""
    return [*(language.name for language in languages.available()), "PyTorch operators"]


@dataclass(frozen=True, kw_only=True)
class Finding:
    rule: str
    message: str
    line: int | None = None


@dataclass(kw_only=True)
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
        self.module_imports: list[tuple[str, ast.AST]] = []
        """(module, the statement or call that imports it): what `_import_findings` checks."""

    def visit_Import(self, node: ast.Import) -> None:
        for alias in node.names:
            self.imports.append(alias.name)
            self.module_imports.append((alias.name, node))
            if alias.asname:
                self.aliases[alias.asname] = alias.name
            else:
                top = alias.name.split(".")[0]
                self.aliases[top] = top
            self.references.append((alias.name, node.lineno))

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        module = node.module or ""
        self.imports.append(module)
        if node.level == 0:  # a relative import names no installed package
            self.module_imports.append((module, node))
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
        if name in {"importlib.import_module", "builtins.__import__", "__import__"} and node.args:
            module = _const_str(node.args[0])
            if module:
                self.imports.append(module)
                self.references.append((module, node.lineno))
                self.module_imports.append((module, node))
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


def _listed(items: list[str]) -> str:
    """"a, b and c"."""
    return items[0] if len(items) == 1 else f"{', '.join(items[:-1])} and {items[-1]}"


def _catches_import_errors(handler: ast.ExceptHandler) -> bool:
    """Whether an `except` clause catches a failed import (IMPORT_ERRORS, or a bare `except:`)."""
    if handler.type is None:
        return True
    caught = handler.type.elts if isinstance(handler.type, ast.Tuple) else [handler.type]
    names = {c.id if isinstance(c, ast.Name) else c.attr if isinstance(c, ast.Attribute) else "" for c in caught}
    return bool(names & IMPORT_ERRORS)


def _guarded(tree: ast.Module) -> set[int]:
    """ids of the nodes inside a `try` body whose handlers catch a failed import."""
    guarded: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Try, ast.TryStar)) and any(map(_catches_import_errors, node.handlers)):
            guarded.update(id(inner) for statement in node.body for inner in ast.walk(statement))
    return guarded


def _import_findings(tree: ast.Module, imports: list[tuple[str, ast.AST]]) -> list[Finding]:
    """Imports that cannot be judged here, one finding per top-level package.

    A kernel language counts wherever it is imported (in a function, through importlib.import_module with a
    literal name): the candidate's kernel is written in it. One this host judges (sandbox/shared/languages.py
    `judged_packages`) counts when it is not installed; any other counts even when it is installed (CuPy, Numba,
    JAX on a GPU image): the judge neither builds its kernels in the build stage nor recognises them, so it would
    compile on the device's time and be judged by rules that do not know it. Any other package counts only when it
    is not installed and is imported by a statement at the top of the module, which certainly runs. Imports inside
    a `try` that catches ImportError are the candidate's own fallbacks and count only where they would succeed
    with a language the judge does not judge.
    """
    guarded, top_level = _guarded(tree), {id(statement) for statement in tree.body}
    judged = languages.judged_packages()
    findings: list[Finding] = []
    seen: set[str] = set()
    for module, node in imports:
        top = module.split(".")[0]
        if not top or top in seen or top in JUDGE_PACKAGES:
            continue
        language = KERNEL_LANGUAGES.get(top)
        if language is None and (id(node) in guarded or id(node) not in top_level):
            continue  # a plain package counts only unguarded at the top: no need to look it up
        installed = importable(top)
        foreign = language is not None and top not in judged and installed
        if not foreign and (installed or id(node) in guarded):
            continue
        seen.add(top)
        line = getattr(node, "lineno", None)
        if foreign:
            message = (f"line {line}: imports {module} ({language}), a kernel language this judge does not judge "
                       f"(it is installed here, but its kernels would be compiled on the device's time and are not "
                       f"recognised by the judge's rules). This host judges {_listed(supported_languages())}; "
                       "write the kernel in one of those.")
            findings.append(Finding(rule="unsupported_language", message=message, line=line))
        elif language is not None:
            message = (f"line {line}: imports {module} ({language}), a kernel language this judge cannot run: "
                       f"{top!r} is not installed here. This host judges {_listed(supported_languages())}; "
                       "write the kernel in one of those.")
            findings.append(Finding(rule="unsupported_language", message=message, line=line))
        else:
            message = (f"line {line}: imports {module}, which is not installed in the judge's environment, so the "
                       "candidate's import would fail. Import only torch, the standard library and installed "
                       "packages, or guard an optional import with try/except ImportError and a fallback.")
            findings.append(Finding(rule="missing_module", message=message, line=line))
    return findings


def check_source(source: str, forbidden_names: frozenset[str], forbidden_aten_ops: frozenset[str]) -> StaticReport:
    """Parse and check; raises SyntaxError for unparsable source (the caller turns that into a verdict).

    Findings that make the candidate impossible to run here (an unsupported kernel language, a package that
    is not installed) come first: they are the answer a person needs, whatever else is wrong."""
    tree = ast.parse(source)
    resolver = _Resolver()
    resolver.visit(tree)
    report = StaticReport(imports=sorted(set(resolver.imports)), dynamic_code=resolver.dynamic)
    report.findings.extend(_import_findings(tree, resolver.module_imports))

    if not resolver.has_model_new:
        report.findings.append(Finding(rule="missing_model_new", message="the module does not define class ModelNew"))
    elif not resolver.model_new_has_forward:
        report.findings.append(Finding(rule="missing_forward", message="class ModelNew does not define forward()"))

    forbidden = set(forbidden_names) | _aten_python_names(forbidden_aten_ops)
    short_names = {name.rsplit(".", 1)[-1] for name in forbidden}
    seen: set[str] = set()
    for name, line in resolver.references:
        for bad in forbidden:
            if (name == bad or name.startswith(bad + ".")) and bad not in seen:
                seen.add(bad)
                report.findings.append(Finding(rule="forbidden_operator", message=f"references {bad} (as {name})",
                                               line=line))
        top = name.split(".")[0]
        if top in JUDGE_PACKAGES and top not in seen and top not in sys.builtin_module_names:
            seen.add(top)
            report.findings.append(Finding(rule="judge_import",
                                           message=f"imports the judge's own package {top!r} ({name})", line=line))
    for attr, line in resolver.getattr_strings:
        if attr in short_names and attr not in seen:
            seen.add(attr)
            report.findings.append(Finding(rule="forbidden_operator",
                                           message=f"getattr(..., {attr!r}) reaches a forbidden operator", line=line))
    return report
