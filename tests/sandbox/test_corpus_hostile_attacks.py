"""The hostile CPU corpus, classes 1-9 and the training attacks (tests/corpus/hostile/cpu, every file but c10-c14),
each judged to the verdict its header declares (tests/sandbox/test_corpus.py, `check_judged`); the directory's honest
control among them: after the crashes, floods and escapes before it, the judge still ranks it `correct`."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from .conftest import CORPUS
from .test_corpus import check_judged

_LATER = re.compile(r"c1[0-4]_")
"""Classes 10-14, judged in tests/sandbox/test_corpus_hostile_registries.py; the rest in ..._attacks.py."""
FILES = [p for p in sorted((CORPUS / "hostile" / "cpu").glob("*")) if not _LATER.match(p.name)]


@pytest.mark.parametrize("path", FILES, ids=lambda p: f"hostile/{p.name}")
def test_hostile_candidate_gets_expected_verdict(path: Path, judge_config, fast_config) -> None:
    check_judged(path, judge_config, fast_config)
