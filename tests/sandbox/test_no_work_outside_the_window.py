"""Issue 39: no task work outside the timed window, whatever runs it; and a child's forged frames are its verdict.

A timed call's inputs are made inside `go`, just before the call (sandbox/child/timing.py): before that they do
not exist in the child, so code of the candidate's that works on them, whatever triggers it, runs inside the round
trip the parent measures. These judge real candidates (C++ builds, isolated children) at the CPU size:

- one that wraps the task's own input generator in the child (module state that no hook registry lists) and does
  every timed call's work there is refused by the parent's CPU accounting of the round trip, or, where a loaded host
  inflates its claim, ranked at no less than that accounting (no faster than the reference's eager time);
- one whose import writes a frame that is not the judge's on its pipes, in the build child, gets the candidate's
  verdict (compile_error, rule "protocol"), stored, never a system_error of the judge's.
"""

from __future__ import annotations

import re
from pathlib import Path

from sandbox import Status, judge, prepare

from .conftest import corpus_meta

CANDIDATES = Path(__file__).resolve().parent / "candidates"


def test_work_done_by_a_wrapped_task_generator_is_inside_the_measured_round_trip(judge_config) -> None:
    path = CANDIDATES / "wraps_the_task_generator.py"
    meta = corpus_meta(path)
    verdict = judge(meta["task"], path.read_text(), "cpu", config=judge_config)
    # Whatever the load, the work hidden in the making of the inputs is the candidate's: refused outright when its
    # claim is a gross understatement of the parent's measure, else ranked at no less than that measure. On a loaded
    # 2-core host the child's wall clock counts the time it waited for a CPU, so the stored answer's claim can reach
    # the refusal's 0.3 of the floor (CI, 2026-11-28: ranked 0.357 ms, 0.51x eager): then it must gain nothing.
    assert verdict.status.value in (meta["expect"], "correct"), verdict.diagnosis
    timing = verdict.details["timing"]
    if verdict.status.value == meta["expect"]:
        assert re.search(meta["diagnosis"], verdict.diagnosis) and verdict.details["rule"] == "timing"
        assert timing["call_floor_ms"] > 2 * min(timing["batch_claims_ms"]), "the parent measured the hidden work"
        return
    perf = verdict.performance
    assert perf is not None and perf.candidate.median_ms >= 0.99 * timing["call_floor_ms"], (perf, timing)
    # Four calls' work each call: never faster than the reference's own eager time on the same host.
    assert perf.speedups["eager"] < 1.0, verdict.diagnosis


def test_a_build_child_that_forges_its_reply_gets_the_candidates_verdict_and_it_is_stored(judge_config) -> None:
    path = CANDIDATES / "forges_the_build_reply.py"
    meta = corpus_meta(path)
    verdict = judge(meta["task"], path.read_text(), "cpu", config=judge_config)
    assert verdict.status is Status.COMPILE_ERROR and verdict.status.value == meta["expect"], verdict.diagnosis
    assert re.search(meta["diagnosis"], verdict.diagnosis) and verdict.details["rule"] == "protocol"
    again = prepare(meta["task"], path.read_text(), target="cpu", config=judge_config)
    assert again.status is Status.COMPILE_ERROR and again.details["rule"] == "protocol"
    # Stored like any build outcome: the second answer is read back, no child is started for it.
    assert again.stages["compile"] < 0.5 < verdict.stages["compile"], (again.stages, verdict.stages)
