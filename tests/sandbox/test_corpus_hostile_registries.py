"""The hostile CPU corpus, classes 10-14 (tests/corpus/hostile/cpu/c1[0-4]_*: numerics, the harness's clocks and
frames, dead threads, the registries a candidate can hook), each judged to the verdict its header declares
(tests/sandbox/test_corpus.py, `check_judged`)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from .conftest import CORPUS
from .test_corpus import check_judged

_LATER = re.compile(r"c1[0-4]_")
"""Classes 10-14, judged in tests/sandbox/test_corpus_hostile_registries.py; the rest in ..._attacks.py."""
FILES = [p for p in sorted((CORPUS / "hostile" / "cpu").glob("*")) if _LATER.match(p.name)]


@pytest.mark.parametrize("path", FILES, ids=lambda p: f"hostile/{p.name}")
def test_hostile_candidate_gets_expected_verdict(path: Path, judge_config, fast_config) -> None:
    check_judged(path, judge_config, fast_config)
