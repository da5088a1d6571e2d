"""Every candidate in tests/corpus/cpu gets the verdict its header declares (tests/corpus/hostile/cpu: the two
test_corpus_hostile_*.py files, which judge theirs with `check_judged` here).

Each file says `expect:` (a status, or an alternation such as `(tamper_detected|incorrect)` where two
defences may fire first), `task:` and optionally `diagnosis:` (a regular expression the diagnosis must
match). The judge runs for real: ninja and g++ builds, an isolated child, fp64 truth in this process.

Each file's candidates are judged by one test process in name order, so the judge's survival is covered too: after
`cpu/infinite_loop.py` (a hang), later files still get their verdicts (`kl_div_cpp_correct.py`, `correct`), as after
the hostile directories' crashes and floods do theirs (their honest controls, `correct`). Three files, not one, so
that the two test processes of CI share them.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from sandbox import Status, judge
from sandbox.config import JudgeConfig
from sandbox.verdict import Verdict

from .conftest import CORPUS, corpus_meta

FILES = sorted((CORPUS / "cpu").glob("*"))


def check_correct(verdict: Verdict) -> None:
    """A correct verdict carries everything a leaderboard needs."""
    assert verdict.trials and all(t.passed for t in verdict.trials)
    assert {t.distribution for t in verdict.trials} >= {"official"}
    assert len({t.seed for t in verdict.trials}) == len(verdict.trials), "every trial needs a fresh seed"
    perf = verdict.performance
    assert perf is not None and perf.candidate.median_ms > 0
    assert perf.candidate.q25_ms <= perf.candidate.median_ms <= perf.candidate.q75_ms
    assert set(perf.speedups) == {"eager", "compile"} and all(s > 0 for s in perf.speedups.values())
    assert perf.speed_of_light_fraction is not None and perf.speed_of_light_fraction > 0
    assert verdict.environment is not None and verdict.environment.isolation in {"bwrap", "unshare", "none"}
    assert {"compile", "correctness", "timing"} <= set(verdict.stages)
    assert verdict.extra_shapes and all(e.passed for e in verdict.extra_shapes)


@pytest.mark.parametrize("path", FILES, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_corpus_candidate_gets_expected_verdict(path: Path, judge_config, fast_config) -> None:
    check_judged(path, judge_config, fast_config)


TIMING_KEYS = ("timed_calls", "batch_size", "call_floor_ms", "run_median_ms", "empty_call_run_ms", "batch_claims_ms",
               "runs_ms", "cpu_time_source", "cpu_readings_unsettled", "cpu_scale", "clocks")


def _bound_inputs(verdict: Verdict) -> dict:
    """What the timing bounds read, for a verdict other than the one declared: a bound that let a forgery through (or
    refused an honest kernel) on a loaded CI machine can only be understood from these."""
    timing = (verdict.details or {}).get("timing") or {}
    return {key: timing[key] for key in TIMING_KEYS if key in timing}


def check_judged(path: Path, judge_config: JudgeConfig, fast_config: JudgeConfig) -> None:
    """`path` judged for real gets the verdict (and the diagnosis) its header declares."""
    meta = corpus_meta(path)
    config = fast_config if "timeout" in meta["expect"] else judge_config
    check_verdict(path, judge(meta["task"], path.read_text(encoding="utf-8"), "cpu", config=config))


def check_verdict(path: Path, verdict: Verdict) -> None:
    """`verdict`, of `path` judged for real, is the one (with the diagnosis) its header declares."""
    meta = corpus_meta(path)
    assert re.fullmatch(meta["expect"], verdict.status.value), \
        f"{verdict.status.value}: {verdict.diagnosis}\ntiming bounds' inputs: {_bound_inputs(verdict)}"
    if "diagnosis" in meta:
        assert re.search(meta["diagnosis"], verdict.diagnosis), verdict.diagnosis
    assert verdict.diagnosis.strip(), "every verdict needs a diagnosis"
    assert Verdict.model_validate_json(verdict.model_dump_json()).model_dump_json() == verdict.model_dump_json()
    if verdict.status is Status.CORRECT:
        check_correct(verdict)


def test_compile_error_keeps_the_full_log_and_leads_with_the_error(judge_config) -> None:
    verdict = judge("kl_div", (CORPUS / "cpu" / "compile_error.py").read_text(), "cpu", config=judge_config)
    assert verdict.status is Status.COMPILE_ERROR
    first_line = verdict.diagnosis.splitlines()[1]
    assert re.match(r"candidate\.py line \d+: main\.cpp:\d+", first_line), verdict.diagnosis  # its own line first
    assert "undeclared_weight" in verdict.compile_log and "--- full log ---" in verdict.compile_log


def test_identical_source_is_built_once(judge_config) -> None:
    from sandbox import prepare

    source = (CORPUS / "cpu" / "cross_entropy_cpp_correct.py").read_text()
    first = prepare("cross_entropy", source, target="cpu", config=judge_config)
    second = prepare("cross_entropy", source, target="cpu", config=judge_config)
    assert first.build_key == second.build_key and first.build_dir == second.build_dir
    assert second.compile_cached, "the second prepare must reuse the first build"


def test_a_child_that_cannot_start_is_a_system_error_not_the_candidates(judge_config, tmp_path) -> None:
    """A child that dies before the candidate is loaded (here: too little memory to import torch) is the
    judge's failure: system_error, which the service retries, never a verdict against the candidate."""
    from dataclasses import replace

    from sandbox import execute, prepare

    source = (CORPUS / "cpu" / "kl_div_cpp_correct.py").read_text()
    prepared = prepare("kl_div", source, target="cpu", config=judge_config)
    assert not isinstance(prepared, Verdict), prepared
    broken = replace(judge_config, memory_limit_bytes=48 << 20)
    verdict = execute(prepared, "cpu", config=broken)
    assert verdict.status is Status.SYSTEM_ERROR, verdict.diagnosis
    assert "before loading the candidate" in verdict.diagnosis


def test_runaway_host_memory_with_default_limits_is_a_memory_error_not_a_timeout(judge_config: JudgeConfig) -> None:
    """Issue 11: with the default memory limit a runaway allocation used to end as `timeout` (this host pages
    memory in at ~200 MB/s, so 16 GiB takes minutes) with torch profiler lines as its "last output". It
    must be a runtime_error that names memory, without profiler noise. The limit is the default, capped at
    half the host's free memory so that the test never wakes the host's own OOM killer."""
    import os
    from dataclasses import replace

    from sandbox.supervisor import PROFILER_NOISE

    free = os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    config = replace(judge_config, memory_limit_bytes=min(JudgeConfig().memory_limit_bytes, free // 2),
                     call_timeout_s=10.0)
    path = CORPUS / "hostile" / "cpu" / "c8_host_memory.py"
    verdict = judge(corpus_meta(path)["task"], path.read_text(), "cpu", config=config)
    assert verdict.status is Status.RUNTIME_ERROR, verdict.diagnosis
    assert "memory" in verdict.diagnosis
    assert not any(PROFILER_NOISE.match(line) for line in verdict.diagnosis.splitlines()), verdict.diagnosis
