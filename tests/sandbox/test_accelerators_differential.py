"""The judge's build accelerators never change a verdict: C++ candidates of the CPU corpus (`BOTH_WAYS`), judged
with them (the config's defaults: precompiled headers, subset first) and without (`precompiled_headers=False`).

Real builds in two build roots (the test run's, and a fresh one for the builds without), so that neither can
reuse the other's outcome; the PCH variants and the baselines come from the run's cache root (trusted artifacts
the judge builds from torch alone, whatever the candidate). The accelerators act only at the build stage, and a
build's products are the same either way (sandbox/build/accel.py), so most files are compared there (the outcome
of `prepare`); the model-style files (`model_*`, written as models write kernels: repeated includes, their own
PYBIND11_MODULE, include guards, odd flags, a raw completion) go through the whole judge both ways and must get
the verdict their header declares: here without the accelerators, in tests/sandbox/test_corpus.py with them.

A file to which the judge offers no accelerator (flags no PCH is built for, such as `-std=c++14`) is built once:
its build child gets exactly the environment and binds it gets without the accelerators (checked here, from
`offer_accelerators` itself), so a second build would run the same commands. Building both `-std` files twice
cost ~90 s of CPU a run and compared nothing.
"""

from __future__ import annotations

import re
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from pathlib import Path

import pytest

from sandbox.build import accel as build_accel
from sandbox import execute
from sandbox.config import JudgeConfig
from sandbox.extract import extract_candidate
from sandbox.pipeline import PreparedCandidate, prepare
from sandbox.shared.accel_layout import FULL_NOT_BUILT
from sandbox.verdict import Verdict

from .conftest import CORPUS, corpus_meta, offered_no_accelerator
from .test_corpus import FILES as CORPUS_FILES

CPP_FILES = [p for p in sorted((CORPUS / "cpu").glob("*"))
             if p.is_file() and "load_inline(" in p.read_text(encoding="utf-8")]
MODEL_FILES = [p for p in CPP_FILES if p.name.startswith("model_")]
BOTH_WAYS = MODEL_FILES + [CORPUS / "cpu" / name for name in
                           ("compile_error.py", "kl_div_cpp_correct.py", "kl_div_train_cpp_fused.py")]
"""The files built without the accelerators too: every model-style file, a compile error (the fallback's other
path), the hand-written forward and a training extension. The other C++ files of the corpus repeat these
three's headers and flags (`-O2`, as kl_div_cpp_correct), so a build of each without accelerators added ~40 s of
CPU apiece to CI and no case the comparison did not already have."""
PCH_OFFERED = "main.cpp offered the precompiled torch/extension.h"
PCH_GIVEN_UP = "building it again without a precompiled header"


def _stage_outcome(prepared: PreparedCandidate | Verdict) -> str:
    return "built" if isinstance(prepared, PreparedCandidate) else prepared.status.value


def _log(prepared: PreparedCandidate | Verdict) -> str:
    return prepared.compile_log or ""


def _precompilable(path: Path) -> bool:
    """Whether the judge offers this candidate a PCH: literal, harmless extra_cflags (sandbox/build/accel.py)."""
    return bool(build_accel.wanted_flag_sets(extract_candidate(path.read_text(encoding="utf-8"))))


def test_the_model_style_files_cover_what_models_write() -> None:
    texts = {p.name: extract_candidate(p.read_text(encoding="utf-8")) for p in MODEL_FILES}
    assert len(MODEL_FILES) >= 6 and {corpus_meta(p)["task"] for p in MODEL_FILES} == {"kl_div", "cross_entropy"}
    joined = "\n".join(texts.values())
    assert sum("#include <torch/extension.h>" in t for t in texts.values()) >= 5
    assert "#pragma once" in joined and "#ifndef" in joined and "PYBIND11_MODULE" in joined
    assert re.search(r"#include <vector>\s*\n(#include <\w+>\s*\n)*#include <torch/extension.h>", joined)
    for flags in ('["-O3"]', '["-std=c++17"]', '["-O3", "-ffast-math"]', '["-std=c++14"]'):
        assert f"extra_cflags={flags}" in joined, flags
    assert any(p.suffix == ".md" for p in MODEL_FILES)
    assert any("PYBIND11_MODULE" in t and "functions=" not in t for t in texts.values())


@pytest.mark.slow
@pytest.mark.timeout(1800)  # a fresh pytest run also builds the 4 PCH variants the files ask for (~75 s each, 2 cores)
def test_accelerators_never_change_a_verdict(judge_config: JudgeConfig, tmp_path: Path) -> None:
    # With the accelerators: the test run's build root, which tests/sandbox/test_corpus.py judges the same files in
    # with the same (default) configuration, so each accelerated build is made once per run. Without: a fresh root
    # of its own, so that no accelerated outcome can be reused there.
    on = judge_config
    off = replace(judge_config, build_root=tmp_path / "off", precompiled_headers=False)
    once = {path for path in BOTH_WAYS
            if offered_no_accelerator(extract_candidate(path.read_text(encoding="utf-8")), on)}
    assert once == {CORPUS / "cpu" / "model_cross_entropy_std17.py", CORPUS / "cpu" / "model_kl_div_std14.py"}, once
    runs = [(path, config) for path in BOTH_WAYS for config in (on, off) if config is on or path not in once]
    # Their variants as a host has them: the subset PCH, the full one only where the text names torch's frontend
    # (sandbox/build/accel.py, full on demand). None of the files that build needs more than the subset, repeated
    # includes and all (checked below), so each of them uses a PCH to the end; a compile error that a missing
    # declaration could explain is compiled again without (the full PCH is not built yet), as the fallback's
    # other path. The states without the full PCH are tests/sandbox/test_pch_subset_first.py's.
    for path in BOTH_WAYS:
        source = extract_candidate(path.read_text(encoding="utf-8"))
        build_accel.preparation(on.cache_root, "cpu", source)
    with ThreadPoolExecutor(max_workers=2) as pool:  # two builds at once: one per core of the CI machine
        done = list(pool.map(lambda run: prepare(corpus_meta(run[0])["task"], run[0].read_text(encoding="utf-8"),
                                                 target="cpu", config=run[1]), runs))
    outcomes = {(path.name, config is on): prepared for (path, config), prepared in zip(runs, done)}

    outcomes.update({(path.name, False): outcomes[path.name, True] for path in once})  # offered nothing: one build
    for path in BOTH_WAYS:
        with_accel, without = outcomes[path.name, True], outcomes[path.name, False]
        assert _stage_outcome(with_accel) == _stage_outcome(without), (
            f"{path.name}: {_stage_outcome(with_accel)} with the accelerators, {_stage_outcome(without)} without\n"
            f"{_log(with_accel)[-3000:]}")
        assert PCH_OFFERED not in _log(without), path.name
        if _precompilable(path):  # the accelerated build really used a PCH, to the end
            assert PCH_OFFERED in _log(with_accel) and PCH_GIVEN_UP not in _log(with_accel), path.name
            if isinstance(with_accel, PreparedCandidate):
                assert FULL_NOT_BUILT not in _log(with_accel), f"{path.name} needed the full PCH: {_log(with_accel)}"
        else:
            assert PCH_OFFERED not in _log(with_accel), path.name

    # The whole judge: without the accelerators here; with them, tests/sandbox/test_corpus.py judges these very
    # files with this very configuration (the run's `judge_config`, default accelerators) against the same header.
    # Both must match the declared verdict, which for these files is one status, so they agree.
    assert set(MODEL_FILES) <= set(CORPUS_FILES)
    for path in MODEL_FILES:
        expected = corpus_meta(path)["expect"]
        assert re.fullmatch(r"\w+", expected), f"{path.name}: one declared status, so that both ways must agree"
        prepared = outcomes[path.name, False]
        verdict = execute(prepared, "cpu", config=off) if isinstance(prepared, PreparedCandidate) else prepared
        assert re.fullmatch(expected, verdict.status.value), f"{path.name}: {verdict.diagnosis}"
        if "diagnosis" in corpus_meta(path):
            assert re.search(corpus_meta(path)["diagnosis"], verdict.diagnosis), verdict.diagnosis
