"""Reading a failed build's compiler log: which lines are errors, where, and of what kind. Pure text; read on both sides
of the trust boundary: by the build child, which asks whether building again without an accelerator could change the
outcome (sandbox/child/build/retry_rule.py), and by the parent, which places the errors in the candidate's own file
(sandbox/build/errors.py).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_LOCATED = re.compile(
    r"^(?P<path>[^\s:()]+)(?::(?P<line>\d+)(?::(?P<col>\d+))?|\((?P<pline>\d+)\))\s*:\s*"
    r"(?P<severity>fatal error|catastrophic error|error)(?:\s*#[\w-]+)?\s*:\s*(?P<message>.*)$", re.M)
"""An error line of g++ (`path:line:col: error: msg`) or of nvcc's front end (`path(line): error #20-D: msg`)."""
_SEVERITY = re.compile(r"(?:^|[\s:])(?:fatal |catastrophic )?error(?:\s*#[\w-]+)?\s*:")
"""Any line that reports an error, located or not (`cc1plus: error: ...`, `nvcc fatal : ...` is not one)."""
_FAILED = re.compile(r"^FAILED: (?:\[code=\d+\] )?(?P<target>\S+)", re.M)
"""ninja's line for a failed edge (1.12+ puts the exit status first); its command and output follow."""

UNDECLARED = re.compile(
    r"was not declared|has not been declared|not declared in|is not a member of|does not name a (?:type|template)"
    r"|has no member|incomplete (?:type|class)|no matching (?:function|constructor|member)|no match for"
    r"|is not a (?:template|type|class|namespace)|no type named|is undefined|no instance of|no operator "
    r"|not a class or struct name|is not a type name|must be a class or namespace name|explicit type is missing"
    r"|has no storage class or type specifier|undeclared|unknown type name|no member named|no template named")
"""A name, member, overload or type the compiler did not find or found incomplete (g++ and nvcc's words): what a
header left out causes, and also a typo. Kind `undeclared`."""
UNKNOWN_NAME_SYNTAX = re.compile(
    r"expected (?:constructor, destructor, or type conversion|initializer before|unqualified-id|type-specifier"
    r"|class-name|template-name|namespace-name|nested-name-specifier|primary-expression|a type specifier"
    r"|an identifier)")
"""Syntax errors that an unknown name or macro also causes (`C10_HOST_DEVICE float f()` with the macro unknown
reads as a declaration gone wrong): never counted as the candidate's own syntax."""
_KINDS = (("undeclared", UNDECLARED), ("syntax", re.compile(r"^expected\b|\bexpected an? \S|missing '")),
          ("type", re.compile(r"convert|conversion|cannot be used to initialize|incompatible|invalid operands"
                              r"|cannot bind|lvalue|read-only|narrowing|ambiguous|deleted function")))


@dataclass(frozen=True, kw_only=True)
class Located:
    """One error line as the compiler wrote it."""

    path: str
    line: int
    column: int | None
    message: str
    severity: str

    @property
    def location(self) -> str:
        """Where, as the compiler says it, with the file's name only: `main.cpp:12:5`, `cuda.cu(12)`."""
        name = self.path.rsplit("/", 1)[-1]
        if self.column is None and self.path.endswith((".cu", ".cuh")):
            return f"{name}({self.line})"
        return f"{name}:{self.line}" + (f":{self.column}" if self.column is not None else "")

    @property
    def kind(self) -> str:
        return kind_of(self.message)


def kind_of(message: str) -> str:
    """`undeclared`, `syntax`, `type` or `other`: what the compiler's message says went wrong."""
    for kind, pattern in _KINDS:
        if pattern.search(message):
            return kind
    return "other"


def located(log: str) -> list[Located]:
    """Every located error line of a log, in order, each (path, line, message) once."""
    found, seen = [], set()
    for m in _LOCATED.finditer(log):
        line = int(m.group("line") or m.group("pline"))
        key = (m.group("path"), line, m.group("message").strip())
        if key in seen:
            continue
        seen.add(key)
        found.append(Located(path=m.group("path"), line=line, column=int(m.group("col")) if m.group("col") else None,
                             message=m.group("message").strip(), severity=m.group("severity")))
    return found
