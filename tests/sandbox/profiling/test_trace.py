"""The kernel-trace rules of issue 28 on recorded kineto traces (tests/fixtures/trace: torch.profiler's chrome-trace
layout, H100-like times): an honest kernel passes; work on a side stream and deferred past its window is refused;
a call that launches other kernels once timed is flagged; each call's launches and bytes are reported."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from sandbox.shared.trace import (Record, TraceParseError, Window, check, differing_calls, outside_windows,
                                     parse_chrome_trace, per_call)

TRACES = Path(__file__).resolve().parents[2] / "fixtures" / "trace"
STREAMS = {7}


def _trace(name: str) -> tuple[list[Record], list[Window]]:
    return parse_chrome_trace((TRACES / f"{name}.json").read_text())


def test_kineto_export_parses_into_records_and_windows():
    records, windows = _trace("honest")
    kinds = {r.kind for r in records}
    assert kinds == {"kernel", "memcpy"}
    assert [w.label for w in windows if w.timed] == [f"judge/timed/{i}" for i in range(4)]
    first_kl = next(r for r in records if r.name.startswith("kl_fast_kernel"))
    assert (first_kl.grid, first_kl.block, first_kl.stream) == ((264, 1, 1), (1024, 1, 1), 7)
    assert first_kl.end_ns - first_kl.start_ns == 721_300
    copy = next(r for r in records if r.kind == "memcpy")
    assert copy.bytes == 4 and copy.name.startswith("Memcpy DtoH")
    assert all(r.start_ns <= s.start_ns for r, s in zip(records, records[1:]))  # by start time


def test_an_honest_candidate_breaks_no_rule():
    records, windows = _trace("honest")
    assert check(records, windows, STREAMS) == []
    calls = per_call(records, windows)
    assert [(c.launches, c.copies) for c in calls] == [(1, 0)] * 4
    assert calls[0].kernel_ns == 721_300 and calls[0].kernels[0][1:] == ((264, 1, 1), (1024, 1, 1))


def test_side_stream_work_and_work_deferred_past_the_window_are_refused():
    records, windows = _trace("side_stream")
    findings = outside_windows(records, windows, STREAMS)
    assert [f.rule for f in findings] == ["outside_windows", "unseen_stream"]
    stray, unseen = findings
    assert [r.name for r in stray.records] == ["deferred_tail(float*, long)"]
    assert "stream 13" in stray.message
    assert [r.name for r in unseen.records] == ["side_work(float*, long)"] and "[13]" in unseen.message
    (differs,) = differing_calls(records, windows)  # its side-stream kernel makes call 1 unlike the others
    assert "judge/timed/1 ran ['kl_fast_kernel" in differs.message and "'side_work(float*, long)'" in differs.message


def test_a_call_that_launches_other_kernels_once_timed_is_flagged():
    records, windows = _trace("differs")
    (finding,) = check(records, windows, STREAMS)
    assert finding.rule == "differing_call"
    assert "1 of 4 timed calls" in finding.message and "judge/timed/2 ran ['kl_cheap_kernel" in finding.message


def test_work_before_the_timing_phase_is_not_judged_by_these_rules():
    records, windows = _trace("honest")
    assert records[0].name.startswith("void at::native::")  # a correctness trial's input generation
    assert not any(w.holds(records[0]) for w in windows)
    assert outside_windows(records, [], STREAMS) == []  # no timed window: nothing to judge


@pytest.mark.parametrize("text", ["[]", "{}", '{"traceEvents": 3}', "not json",
                                  json.dumps({"traceEvents": [{"ph": "X", "cat": "kernel", "name": "k"}]})])
def test_text_that_is_not_a_chrome_trace_is_refused(text):
    with pytest.raises(TraceParseError):
        parse_chrome_trace(text)
