"""The hostile CPU corpus, classes 10-14 (tests/corpus/hostile/cpu/c1[0-4]_*: numerics, the harness's clocks and
frames, dead threads, the registries a candidate can hook), each judged to the verdict its header declares
(tests/sandbox/test_corpus.py, `check_judged`). The firing registry attacks are judged once, in
tests/sandbox/test_registry_attacks.py, beside their honest twins and checked the same way there."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from .conftest import CORPUS
from .test_corpus import check_judged
from .test_registry_attacks import FIRING_ATTACKS

_LATER = re.compile(r"c1[0-4]_")
"""Classes 10-14, judged in tests/sandbox/test_corpus_hostile_registries.py; the rest in ..._attacks.py."""
FILES = [p for p in sorted((CORPUS / "hostile" / "cpu").glob("*")) if _LATER.match(p.name) and p not in FIRING_ATTACKS]


def test_every_class_10_to_14_file_is_judged_here_or_beside_its_twin() -> None:
    everything = {p for p in (CORPUS / "hostile" / "cpu").glob("*") if _LATER.match(p.name)}
    assert set(FILES) | set(FIRING_ATTACKS) == everything and FIRING_ATTACKS and not set(FILES) & set(FIRING_ATTACKS)


@pytest.mark.parametrize("path", FILES, ids=lambda p: f"hostile/{p.name}")
def test_hostile_candidate_gets_expected_verdict(path: Path, judge_config, fast_config) -> None:
    check_judged(path, judge_config, fast_config)
