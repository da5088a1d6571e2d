"""Find the candidate module in what a model wrote.

LLM completions arrive as reasoning text with several fenced code blocks; KernelBench's convention is
that the answer is the last Python block defining `ModelNew`. A bare module (no fences) is taken as is.
"""

from __future__ import annotations

import ast
import re

_FENCE = re.compile(r"^[ \t]*(```+|~~~+)[ \t]*([\w+-]*)[^\n]*\n(.*?)^[ \t]*\1[ \t]*$", re.S | re.M)
_PYTHON_TAGS = {"", "python", "py", "python3"}


class ExtractionError(ValueError):
    """No usable candidate in the text; the message says what to send instead."""


def _defines_model_new(source: str) -> bool:
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return False
    return any(isinstance(node, ast.ClassDef) and node.name == "ModelNew" for node in tree.body)


def extract_candidate(text: str) -> str:
    """Return the candidate module: the last fenced python block that defines ModelNew, or the bare text."""
    if not text.strip():
        raise ExtractionError("the submission is empty: send a Python module that defines class ModelNew")
    blocks = [m.group(3) for m in _FENCE.finditer(text) if m.group(2).lower() in _PYTHON_TAGS]
    for block in reversed(blocks):
        if _defines_model_new(block):
            return block
    if _defines_model_new(text):
        return text
    if blocks:
        raise ExtractionError(
            f"found {len(blocks)} python code block(s) but none defines `class ModelNew(nn.Module)` at "
            "top level; the answer must be the last ```python block and define ModelNew"
        )
    try:
        ast.parse(text)
    except SyntaxError as exc:
        raise ExtractionError(
            f"no fenced python block and the text is not valid Python (line {exc.lineno}: {exc.msg}); "
            "wrap the answer in a ```python block that defines class ModelNew"
        ) from None
    raise ExtractionError("the module does not define `class ModelNew(nn.Module)` at top level")
