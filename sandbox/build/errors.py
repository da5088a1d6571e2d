"""A failed build's compiler errors: read from the log, classified, and placed in the candidate's own file.

Two readers, on either side of the trust boundary:

- The build child (sandbox/child/build/hooks.py) asks `unchangeable` (sandbox/child/build/retry_rule.py) before it
  builds again without an accelerator (the slim headers for a `.cu`, the subset PCH for main.cpp). Those retries
  exist because a header the accelerator left out can make honest code fail; they cost a second compile (60-65 s of
  nvcc for a `.cu` against torch's full headers). They cannot change errors that sit in the candidate's own source
  and are not of the kinds a missing declaration causes: a missing semicolon or a type error fails the same with
  every header. Such a build reports its first compile's errors at once. Anything else (an error in a header, a name
  or member or overload not found, an incomplete type, an error line this module cannot read) is retried as before:
  the rule only ever skips retries, so a doubt costs time, never a verdict.

- The parent (sandbox/pipeline.py) turns a failed build's errors into `CompileError`s whose `file_line` is a line
  of candidate.py. load_inline writes the candidate's strings into generated files (main.cpp: its
  `#include <torch/extension.h>`, the cpp_sources joined by newlines, the pybind11 bindings for `functions`;
  cuda.cu: three include lines, then the cuda_sources), and the compiler names lines of those. The offset is not
  computed from torch's prelude (its length is torch's choice and changes): each string literal of candidate.py
  is looked up in the generated file the build left, and a line of the generated file that falls inside a
  literal found there once maps to the source line that holds that part of the literal. Python escapes are
  followed (`\\n` inside a one-line string, a backslash-newline that joins two lines), so the mapping is exact
  for raw and cooked strings alike. A line made at run time (sources joined from pieces, read from a file) is
  reported where the compiler put it, with its text.

Everything read here was written by candidate code (the log, the generated files): it only ever becomes text in
the candidate's own verdict.
"""

from __future__ import annotations

import ast
import io
import os
import re
import tokenize
import warnings
from dataclasses import dataclass
from pathlib import Path

from sandbox.shared.compile_log import located
from sandbox.verdict import CompileError

LIMIT = 20
"""Errors kept with a verdict: the first ones, in the compiler's order."""
READ_LIMIT = 4 << 20
"""Bytes of a generated file read to place its lines (load_inline's files are the candidate's text and a few lines)."""
MIN_LITERAL = 16
"""Characters a one-line literal needs before it is looked up: shorter ones (names, `functions` entries) recur in
the bindings load_inline writes and would place a line by accident."""
MAX_LITERALS = 64
"""Literals looked up per generated file, the longest first: a candidate's sources are a few long strings, and a
source of thousands of strings must not cost thousands of searches through a 4 MiB file."""

# --- in the parent: the errors, placed in candidate.py ---------------------------------------------------------

@dataclass(frozen=True, kw_only=True)
class Literal:
    """A string constant of candidate.py: its value, and the source line each of its value's lines begins on."""

    value: str
    starts: tuple[int, ...]


def place(log: str, source: str, build_dir: Path, build_mount: str = "/build") -> list[CompileError]:
    """The log's first errors (`LIMIT`), each with the candidate.py line it comes from where it can be found.

    `build_dir` is the build's directory on this host; the log names it `build_mount` under bubblewrap and by its
    own path otherwise. Only files inside it are read, and only plain files (sandbox/compile.audit has passed)."""
    errors = located(log)[:LIMIT]
    if not errors:
        return []
    literals = string_literals(source)
    generated: dict[str, tuple[str, list[Found]] | None] = {}
    placed = []
    for error in errors:
        if error.path not in generated:
            text = _generated_text(error.path, build_dir, build_mount)
            generated[error.path] = (text, find_literals(literals, text)) if text is not None else None
        code = file_line = note = None
        if generated[error.path] is not None:
            text, found = generated[error.path]
            lines = text.split("\n")
            code = lines[error.line - 1].strip()[:200] if 0 < error.line <= len(lines) else None
            file_line = source_line(found, error.line)
            name = error.path.rsplit("/", 1)[-1]
            if file_line is None and code and _BINDING.match(code):
                file_line = functions_line(source, error.path.rsplit("/", 2)[-2] if "/" in error.path else "")
                note = "the bindings load_inline writes for `functions`"
            elif file_line is None:
                note = f"the {name} load_inline generated, not in a string literal of candidate.py"
        placed.append(CompileError(file_line=file_line, location=error.location, message=error.message[:500],
                                   kind=error.kind, code=code, note=note))
    return placed


_BINDING = re.compile(r"m\.def\(|PYBIND11_MODULE\(")


def diagnosis_line(error: CompileError) -> str:
    """One error for the diagnosis: `candidate.py line 42: main.cpp:44:5: expected ';' before 'return'`."""
    if error.file_line is not None:
        where = f"candidate.py line {error.file_line}"
        aside = f" (in {error.note})" if error.note else ""
        return f"{where}: {error.location}: {error.message}{aside}"
    if error.code is not None:
        where = error.note or "a generated file"
        return f"{error.location}: {error.message} (in {where}; the line reads: {error.code})"
    return f"{error.location}: {error.message}"


@dataclass(frozen=True, kw_only=True)
class Found:
    """A literal found once in a generated file, from line `first` on."""

    literal: Literal
    first: int


def find_literals(literals: list[Literal], text: str) -> list[Found]:
    """The literals (the `MAX_LITERALS` longest) that occur exactly once in a generated file, and where."""
    found = []
    for literal in sorted(literals, key=lambda lit: len(lit.value), reverse=True)[:MAX_LITERALS]:
        at = text.find(literal.value)
        if at >= 0 and text.find(literal.value, at + 1) < 0:
            found.append(Found(literal=literal, first=text.count("\n", 0, at) + 1))
    return found


def source_line(found: list[Found], line: int) -> int | None:
    """The candidate.py line behind line `line` of a generated file: the longest literal that covers it decides."""
    for where in found:  # longest first
        if where.first <= line <= where.first + where.literal.value.count("\n"):
            return where.literal.starts[line - where.first]
    return None


def string_literals(source: str) -> list[Literal]:
    """The str constants of a module worth looking up (`MIN_LITERAL`), implicit concatenations joined, each
    with the line every one of its value's lines begins on. f-strings are left out (their text is made at run
    time); so is a literal whose decoding here disagrees with Python's."""
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return []
    lines = [f"{line}\n" for line in source.split("\n")]  # the parser's lines (str.splitlines also splits at \f)
    found = []
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Constant) and isinstance(node.value, str)):
            continue
        if "\n" not in node.value and len(node.value.strip()) < MIN_LITERAL:
            continue
        literal = _literal(node, lines)
        if literal is not None:
            found.append(literal)
    return found


def _literal(node: ast.Constant, lines: list[str]) -> Literal | None:
    segment = _segment(lines, node)
    value, starts = "", [node.lineno]
    try:
        tokens = list(tokenize.generate_tokens(io.StringIO(f"({segment})").readline))
    except (tokenize.TokenError, SyntaxError):
        return None
    for token in tokens:
        if token.type != tokenize.STRING:
            continue
        part, part_starts = _decode(token.string, node.lineno + token.start[0] - 1)
        if part is None:
            return None
        if not value or value.endswith("\n"):
            starts[-1] = part_starts[0]  # a value line that this token begins is on this token's line
        value += part
        starts += part_starts[1:]
    if value != node.value:
        return None
    return Literal(value=value, starts=tuple(starts))


def _segment(lines: list[str], node: ast.expr) -> str:
    """The node's source text (ast.get_source_segment, less its split of the whole source per call); the AST's
    columns count UTF-8 bytes."""
    first = lines[node.lineno - 1].encode()
    if node.lineno == node.end_lineno:
        return first[node.col_offset:node.end_col_offset].decode("utf-8", "replace")
    last = lines[node.end_lineno - 1].encode()
    return (first[node.col_offset:].decode("utf-8", "replace") + "".join(lines[node.lineno:node.end_lineno - 1])
            + last[:node.end_col_offset].decode("utf-8", "replace"))


_ESCAPE = re.compile(r"\\(?:\n|N\{[^}\n]*\}|x[0-9a-fA-F]{2}|u[0-9a-fA-F]{4}|U[0-9a-fA-F]{8}|[0-7]{1,3}|.)", re.S)


def _decode(token: str, first_line: int) -> tuple[str | None, list[int]]:
    """A string token's value, and the source line each line of the value begins on."""
    prefix = re.match(r"[A-Za-z]*", token).group(0).lower()
    if "f" in prefix or "b" in prefix:
        return None, []
    quote = token[len(prefix):len(prefix) + 3] if token[len(prefix):len(prefix) + 3] in ('"""', "'''") \
        else token[len(prefix)]
    body = token[len(prefix) + len(quote):len(token) - len(quote)]
    out, starts, line, i = [], [first_line], first_line, 0
    while i < len(body):
        if body[i] == "\\" and "r" not in prefix:
            escape = _ESCAPE.match(body, i)
            i = escape.end()
            if escape.group(0) == "\\\n":
                line += 1  # a backslash-newline joins two source lines: no line of the value ends here
                continue
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # "\d" and friends: an invalid escape stays as written
                try:
                    decoded = ast.literal_eval(f'"{escape.group(0)}"')
                except (ValueError, SyntaxError):
                    return None, []
            for char in decoded:
                out.append(char)
                if char == "\n":
                    starts.append(line)  # `\n` in the text: the value's next line starts on this source line
            continue
        out.append(body[i])
        if body[i] == "\n":
            line += 1
            starts.append(line)
        i += 1
    return "".join(out), starts


def functions_line(source: str, extension: str) -> int | None:
    """The candidate.py line of `functions=` in the load_inline call that built `extension` (its literal `name`),
    or of the only load_inline call with `functions`."""
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None
    calls = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        name = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", "")
        keywords = {kw.arg: kw.value for kw in node.keywords if kw.arg}
        if name == "load_inline" and "functions" in keywords:
            named = keywords.get("name", node.args[0] if node.args else None)
            calls.append((isinstance(named, ast.Constant) and named.value == extension, keywords["functions"].lineno))
    chosen = [line for matches, line in calls if matches] or ([calls[0][1]] if len(calls) == 1 else [])
    return chosen[0] if chosen else None


def _generated_text(path: str, build_dir: Path, build_mount: str) -> str | None:
    """The text of a file the compiler named, when it lies inside the build directory; None otherwise."""
    for root in (build_mount.rstrip("/"), str(build_dir).rstrip("/")):
        if path.startswith(root + "/"):
            relative = path[len(root) + 1:]
            break
    else:
        return None
    parts = relative.split("/")
    if any(part in ("", ".", "..") for part in parts):
        return None
    try:
        fd = os.open(build_dir.joinpath(*parts), os.O_RDONLY | os.O_NOFOLLOW)
    except OSError:
        return None
    with os.fdopen(fd, "rb") as fh:
        return fh.read(READ_LIMIT).decode("utf-8", "replace")
