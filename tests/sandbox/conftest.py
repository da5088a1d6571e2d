"""Fixtures for judging real candidates on the CPU: one build cache and one baseline cache per session."""

from __future__ import annotations

import re
from dataclasses import replace
from pathlib import Path

import pytest

from sandbox.build import accel as build_accel
from sandbox.build import compiler as build
from sandbox.config import JudgeConfig

CORPUS = Path(__file__).resolve().parents[1] / "corpus"
_HEADER = re.compile(r"^(expect|task|diagnosis|device):\s*(.+?)\s*$", re.M)


def corpus_meta(path: Path) -> dict[str, str]:
    """The `expect:`, `task:` and `diagnosis:` lines from a corpus file's header (docstring or comment)."""
    head = path.read_text(encoding="utf-8")[:3000]
    return {key: value for key, value in _HEADER.findall(head)}


def offered_no_accelerator(code: str, config: JudgeConfig, target: str = "cpu") -> bool:
    """Whether a build of this candidate code is given no accelerator: no PCH variant is wanted for it, and its
    build child gets exactly the environment and binds of a build without the accelerators (sandbox/build/compiler.py
    `offer_accelerators`, what the child is started with). Such a build runs the same commands either way, so the
    differential tests build it once."""
    if build_accel.wanted_flag_sets(code):
        return False
    offer = build.offer_accelerators(config, target, code)
    bare = build.offer_accelerators(replace(config, precompiled_headers=False), target, code)
    return (offer.env, offer.binds) == (bare.env, bare.binds)


@pytest.fixture(scope="session")
def judge_config(judge_root: Path) -> JudgeConfig:
    root = judge_root
    return JudgeConfig(
        build_root=root / "builds",
        cache_root=root / "cache",
        memory_limit_bytes=3 << 30,
        call_timeout_s=20.0,
        timing_budget_ms=300.0,
        trials_per_distribution=1,
        max_reps=30,  # on the CPU the adaptive stop rarely triggers; 30 timed calls give the rules their medians
    )


@pytest.fixture
def fast_config(judge_config: JudgeConfig) -> JudgeConfig:
    """Same caches, shorter per-call limit: for hangs."""
    return replace(judge_config, call_timeout_s=8.0)
