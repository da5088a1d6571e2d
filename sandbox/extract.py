"""Find the candidate module in what a model wrote.

LLM completions arrive as reasoning text with several fenced code blocks; KernelBench's convention is
that the answer is the last Python block defining `ModelNew`. A bare module (no fences) is taken as is.

The text is hostile (any client may send 262 KB of it, and the API extracts it to deduplicate a batch), so
every step here is linear in its length: fences are found by one pass over the lines, not by a backtracking
pattern (`^(```+)...\\n(.*?)^\\1$` with re.S rescans to the end of the text for every unclosed fence: 2,000
of them in 60 KB held the GIL for 17 s), and a module too deep for Python's parser is a diagnosis, not a
RecursionError.
"""

from __future__ import annotations

import ast
import bisect
import re
from collections.abc import Iterator

_OPENER = re.compile(r"[ \t]*(`{3,}|~{3,})")
_CLOSER = re.compile(r"[ \t]*(`{3,}|~{3,})[ \t]*")
_TAG = re.compile(r"[ \t]*([\w+-]*)")
_PYTHON_TAGS = {"", "python", "py", "python3"}


class ExtractionError(ValueError):
    """No usable candidate in the text; the message says what to send instead."""


def _lines(text: str) -> Iterator[tuple[int, int]]:
    """(start, end) of each line, `end` at its newline (or at the end of the text)."""
    start, size = 0, len(text)
    while start <= size:
        end = text.find("\n", start)
        if end < 0:
            yield start, size
            return
        yield start, end
        start = end + 1


def fenced_blocks(text: str) -> list[tuple[str, str]]:
    """(info-string tag, body) of every fenced block, in order, exactly as markdown-style fences pair here:

    an opening line is optional blanks, a run of n >= 3 backticks (or tildes), the rest of the line, and a
    newline; it closes at the first later line that is only blanks and a run of the same character. A closing
    run must be exactly as long as the opening one; when no line closes all n, the longest shorter run k that
    has a closing line after it pairs instead (the opening line then reads as k fence characters followed by
    text, so its tag is empty). An opening line that nothing closes is plain text. Blocks do not nest: the
    scan resumes after the closing line. The body is every line in between, with their newlines.
    """
    spans = list(_lines(text))
    closers: dict[tuple[str, int], list[int]] = {}
    """Line numbers of closing lines by (fence character, run length), ascending."""
    for number, (start, end) in enumerate(spans):
        m = _CLOSER.fullmatch(text, start, end)
        if m is not None:
            run = m.group(1)
            closers.setdefault((run[0], len(run)), []).append(number)
    lengths: dict[str, list[int]] = {}
    for char, n in closers:
        lengths.setdefault(char, []).append(n)
    for found in lengths.values():
        found.sort(reverse=True)

    blocks: list[tuple[str, str]] = []
    number = 0
    last = len(spans) - 1  # the last line has no newline, so it cannot open a block
    while number < last:
        start, end = spans[number]
        m = _OPENER.match(text, start, end)
        pair = _pair(closers, lengths, m.group(1), number) if m is not None else None
        if pair is None:
            number += 1
            continue
        k, close = pair
        tag = _TAG.match(text, m.end(), end).group(1) if k == len(m.group(1)) else ""
        blocks.append((tag, text[spans[number + 1][0]:spans[close][0]]))
        number = close + 1
    return blocks


def _pair(closers: dict[tuple[str, int], list[int]], lengths: dict[str, list[int]], run: str,
          opening: int) -> tuple[int, int] | None:
    """(run length, closing line) for an opening run on line `opening`: the longest run length <= len(run) with
    a closing line after it. Costs at most one lookup per distinct closing length <= len(run), so the scan
    stays within the text's length in all (the runs pay for their lookups)."""
    for k in lengths.get(run[0], ()):
        if k > len(run):
            continue
        found = closers[(run[0], k)]
        at = bisect.bisect_right(found, opening)
        if at < len(found):
            return k, found[at]
    return None


def _parse(source: str) -> ast.Module | str:
    """The module, or why Python cannot parse it."""
    try:
        return ast.parse(source)
    except SyntaxError as exc:
        return f"line {exc.lineno}: {exc.msg}"
    except (RecursionError, MemoryError):
        # CPython's parser recurses per nesting level (`1+1+...+1`, `----1`): such a module could not be
        # imported by the judge either.
        return "nested too deeply for Python's parser"


def _defines_model_new(tree: ast.Module | str) -> bool:
    return not isinstance(tree, str) and any(
        isinstance(node, ast.ClassDef) and node.name == "ModelNew" for node in tree.body)


def extract_candidate(text: str) -> str:
    """Return the candidate module: the last fenced python block that defines ModelNew, or the bare text."""
    if not text.strip():
        raise ExtractionError("the submission is empty: send a Python module that defines class ModelNew")
    blocks = [body for tag, body in fenced_blocks(text) if tag.lower() in _PYTHON_TAGS]
    too_deep = 0
    for block in reversed(blocks):
        tree = _parse(block)
        if _defines_model_new(tree):
            return block
        too_deep += tree == "nested too deeply for Python's parser"
    tree = _parse(text)
    if _defines_model_new(tree):
        return text
    if blocks:
        deep = f" ({too_deep} nested too deeply for Python's parser)" if too_deep else ""
        raise ExtractionError(
            f"found {len(blocks)} python code block(s){deep} but none defines `class ModelNew(nn.Module)` at "
            "top level; the answer must be the last ```python block and define ModelNew"
        )
    if isinstance(tree, str):
        raise ExtractionError(
            f"no fenced python block and the text is not valid Python ({tree}); "
            "wrap the answer in a ```python block that defines class ModelNew"
        )
    raise ExtractionError("the module does not define `class ModelNew(nn.Module)` at top level")
