"""Which samples of a batch are the same code: language models repeat themselves, the judge need not.

Two samples are duplicates when they are for the same task and the candidate module extracted from them
(sandbox.extract, exactly what the judge will run) is byte-identical: two completions whose reasoning
differs but whose final ```python block is the same are judged once. A text with no extractable module is
keyed by its own bytes (it fails extraction identically, so its verdict is shared too).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

from sandbox.extract import ExtractionError, extract_candidate


@dataclass(frozen=True)
class CodeKey:
    task: str
    sha256: str
    """sha256 of the extracted module, or of the raw text when nothing could be extracted."""
    extracted: bool
    """A module was found: the `format` of the reward (service.batches.rewards)."""


def code_key(task: str, text: str) -> CodeKey:
    try:
        code, extracted = extract_candidate(text), True
    except ExtractionError:
        code, extracted = text, False
    return CodeKey(task, hashlib.sha256(code.encode("utf-8")).hexdigest(), extracted)
