"""The parent's side of the kernel trace (sandbox/execution/tracing.py) on synthetic kineto exports laid out as the
child's recorder writes them (sandbox/child/recorder.py): device activity alone, each timed call between two keyed
canaries, the harness's flush in each gap between the calls of a batch. A complete honest record is clean and
reports each call's launches and bytes; a cut record (a canary missing or out of order, a truncated file) and the
rules' breaches are refused; an annotation in the record opens no window; the files are read without following
links and under a size cap; and a refusal becomes the verdict's tamper_detected."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from sandbox.execution import phases, tracing
from sandbox.shared import trace
from sandbox import protocol as msg
from sandbox.config import JudgeConfig
from sandbox.verdict import Status
from reference import get_task

KEY = bytes(range(16))
STREAM = 7
KERNEL = "kl_fast_kernel(float const*, float const*, long, long, long, bool, double, double*, float*)"
FLUSH = "void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<int>>(int, ...)"


class Trace:
    """A chrome trace built call by call, as kineto exports device activity: times in microseconds after
    `baseTimeNanoseconds`, no annotations."""

    def __init__(self) -> None:
        self.events: list[dict] = []
        self.now = 0.0
        self.canary = 0

    def _op(self, cat: str, name: str, dur: float, stream: int = STREAM, **args: object) -> dict:
        event = {"ph": "X", "cat": cat, "name": name, "pid": 0, "tid": stream, "ts": round(self.now, 3), "dur": dur,
                 "args": {"stream": stream, **args}}
        self.events.append(event)
        return event

    def annotation(self, label: str, ops: list[dict]) -> None:
        """A `gpu_user_annotation` span around `ops`, as a trace with host activity would hold one."""
        start = min(o["ts"] for o in ops)
        end = max(o["ts"] + o["dur"] for o in ops)
        self.events.append({"ph": "X", "cat": "gpu_user_annotation", "name": label, "pid": 0, "tid": STREAM,
                            "ts": start, "dur": round(end - start, 3), "args": {}})

    def kernel(self, name: str = KERNEL, dur: float = 721.3, stream: int = STREAM, grid: int = 264) -> dict:
        op = self._op("kernel", name, dur, stream, grid=[grid, 1, 1], block=[1024, 1, 1])
        self.now += dur + 1.0
        return op

    def copy(self, n: int, kind: str = "DtoD (Device -> Device)") -> dict:
        op = self._op("gpu_memcpy", f"Memcpy {kind}", 2.0, bytes=n)
        self.now += 3.0
        return op

    def canaries(self, count: int = 1) -> None:
        for _ in range(count):
            self.copy(trace.canary_bytes(KEY, self.canary))
            self.canary += 1

    def flush(self) -> dict:
        return self.kernel(FLUSH, dur=90.0, grid=1056)

    def call(self, kernels: list[str] | None = None) -> None:
        """One timed call as `time_cuda_batch` queues it: flush, canary, the call's kernels, canary."""
        self.flush()
        self.canaries()
        for name in kernels or [KERNEL]:
            self.kernel(name)
        self.canaries()

    def between_batches(self) -> None:
        """The harness's steps between two batches: the outputs kept and read back, the next inputs made."""
        self.copy(4, "DtoH (Device -> Pinned)")
        self.kernel("normal_kernel", dur=1480.2, grid=1056)
        self.flush()  # a lead flush

    def text(self) -> str:
        return json.dumps({"schemaVersion": 1, "baseTimeNanoseconds": 1764139200000000000, "traceEvents": self.events})


def honest(calls: int = 4) -> Trace:
    t = Trace()
    t.kernel("normal_kernel", dur=1480.2, grid=1056)  # arm: the inputs made, before the timing
    for _ in range(calls):
        t.call()
    t.copy(4, "DtoH (Device -> Pinned)")  # keep
    return t


def test_a_complete_honest_record_is_clean_and_reports_each_call():
    outcome = tracing.judge([honest().text()], KEY, [4], warmup_calls={0})
    assert outcome.status == "clean" and outcome.rule is None
    assert outcome.details["canaries"] == 8 and outcome.details["timed_streams"] == [STREAM]
    per_call = outcome.details["per_call"]
    assert per_call["launches"] == [1, 1, 1] and per_call["bytes_moved"] == [0, 0, 0]  # the warm-up call left out
    assert per_call["kernel_us"] == [721.3] * 3
    assert outcome.details["kernels"] == [{"name": KERNEL, "grid": (264, 1, 1), "block": (1024, 1, 1)}]


def test_the_harness_work_between_batches_is_its_own():
    t = Trace()
    for batch in range(3):
        if batch:
            t.between_batches()
        for _ in range(2):
            t.call()
    assert tracing.judge([t.text()], KEY, [2, 2, 2], warmup_calls=set()).status == "clean"
    outcome = tracing.judge([t.text()], KEY, [6], warmup_calls=set())  # one batch: those steps inside it
    assert outcome.refused and outcome.rule == "outside_windows"
    assert "'Memcpy DtoH (Device -> Pinned)'" in outcome.message


@pytest.mark.parametrize("cut", ["drop", "swap"])
def test_a_record_whose_canaries_were_cut_is_tampering(cut):
    t = honest(calls=3)
    copies = [e for e in t.events if e["cat"] == "gpu_memcpy" and "DtoD" in e["name"]]
    if cut == "drop":  # the recorder stopped before the last call's end
        t.events.remove(copies[-1])
    else:  # two canaries of one call recorded the other way round
        copies[4]["args"]["bytes"], copies[5]["args"]["bytes"] = copies[5]["args"]["bytes"], copies[4]["args"]["bytes"]
    outcome = tracing.judge([t.text()], KEY, [3], warmup_calls=set())
    assert outcome.refused and outcome.rule == "canaries"
    assert "canaries are missing or out of order" in outcome.message
    assert "5 of 6 found in order, canary 5 is not" in outcome.message


def test_a_copy_of_a_canarys_size_moves_no_window_it_can_hide_anything_in():
    """The candidate's own copy of the next canary's size, inside a call, is taken for that canary: the call's
    window then closes early, and what the call ran after it is outside every window, not hidden."""
    t = Trace()
    t.call()
    t.flush()
    t.canaries()
    t.copy(trace.canary_bytes(KEY, 3))  # the call's own copy, of the size its closing canary will have
    t.kernel("kl_after_the_copy(float*)")
    t.canaries()
    t.call()
    outcome = tracing.judge([t.text()], KEY, [3], warmup_calls=set())
    assert outcome.refused and outcome.rule == "outside_windows" and "kl_after_the_copy" in outcome.message


def test_a_truncated_or_absent_record_is_tampering():
    text = honest().text()
    outcome = tracing.judge([text[: len(text) // 2]], KEY, [4], warmup_calls=set())
    assert outcome.refused and outcome.rule == "trace_cut" and "could not be read" in outcome.message
    assert tracing.judge([], KEY, [4], warmup_calls=set()).rule == "canaries"  # no segment: every canary missing


@pytest.mark.parametrize("every_gap", [False, True])
def test_device_work_between_two_calls_of_a_batch_is_refused(every_gap):
    """Beside the flush in a gap, in one gap or in every one (where it is as common as the flush)."""
    t = Trace()
    t.call()
    for _ in range(3 if every_gap else 1):
        t.kernel("deferred_tail(float*, long)", dur=40.0)  # after a call's closing canary
        t.call()
    outcome = tracing.judge([t.text()], KEY, [4 if every_gap else 2], warmup_calls=set())
    assert outcome.refused and outcome.rule == "outside_windows"
    assert "'deferred_tail(float*, long)'" in outcome.message


def test_an_annotation_in_the_record_opens_no_window():
    """A trace with host activity holds `record_function` spans, which any code in the child can open: a kernel
    deferred past its call stays outside every window whatever annotation encloses it."""
    t = Trace()
    t.call()
    t.annotation("judge/harness/flush", [t.kernel("deferred_tail(float*, long)", dur=40.0)])
    t.call()
    outcome = tracing.judge([t.text()], KEY, [2], warmup_calls=set())
    assert outcome.refused and outcome.rule == "outside_windows" and "'deferred_tail(float*, long)'" in outcome.message


def test_a_joined_side_stream_is_clean_and_one_that_runs_past_the_call_is_refused():
    """Work on a side stream the call joins before it returns lies between its canaries, as a kernel another thread
    launched does (an autograd engine's backward): the canaries bound the call."""
    def side_stream(past_the_call: bool) -> Trace:
        t = Trace()
        for _ in range(2):
            t.flush()
            t.canaries()
            main = t.kernel()
            t.now = main["ts"] + 10.0
            side = t.kernel("side_work(float*, long)", dur=200.0, stream=13)  # beside the main kernel
            t.now = main["ts"] + main["dur"] + 1.0
            if past_the_call:
                side["dur"] = 900.0  # still running when the call's closing canary ran
            t.canaries()
            t.now = max(t.now, side["ts"] + side["dur"]) + 1.0
        return t

    joined = tracing.judge([side_stream(False).text()], KEY, [2], warmup_calls=set())
    assert joined.status == "clean" and joined.details["other_streams"] == 2
    assert joined.details["per_call"]["launches"] == [2, 2]
    late = tracing.judge([side_stream(True).text()], KEY, [2], warmup_calls=set())
    assert late.refused and late.rule == "outside_windows"
    assert "'side_work(float*, long)' on stream 13" in late.message


def test_calls_that_launch_other_kernels_once_timed_are_refused_but_a_warm_up_call_may():
    t = Trace()
    t.call(["autotune_candidate_a", "autotune_candidate_b", KERNEL])  # the warm-up's autotuning
    for _ in range(3):
        t.call()
    assert tracing.judge([t.text()], KEY, [4], warmup_calls={0}).status == "clean"
    t.call(["kl_cheap_kernel(float const*, float*)"])
    outcome = tracing.judge([t.text()], KEY, [5], warmup_calls={0})
    assert outcome.refused and outcome.rule == "differing_call"
    assert "judge/timed/4 ran ['kl_cheap_kernel" in outcome.message


def test_segments_are_merged_and_read_without_links_and_under_a_cap(tmp_path):
    first, second = Trace(), Trace()
    second.canary = 2
    first.call()
    second.now = first.now + 100.0
    second.call()
    for i, t in enumerate((first, second)):
        (tmp_path / f"judge-trace-{i}.json").write_text(t.text())
    texts = tracing.read_segments(tmp_path, ["judge-trace-0.json", "judge-trace-1.json"])
    assert tracing.judge(texts, KEY, [2], warmup_calls=set()).status == "clean"

    with pytest.raises(tracing.TraceReadError, match="is named"):
        tracing.read_segments(tmp_path, ["judge-trace-1.json"])  # numbered from 0, in order
    with pytest.raises(tracing.TraceReadError, match="is named"):
        tracing.read_segments(tmp_path, ["../judge-trace-0.json"])
    with pytest.raises(tracing.TraceReadError, match="over 100 bytes"):
        tracing.read_segments(tmp_path, ["judge-trace-0.json"], limit=100)
    os.rename(tmp_path / "judge-trace-0.json", tmp_path / "elsewhere.json")
    os.symlink(tmp_path / "elsewhere.json", tmp_path / "judge-trace-0.json")  # a link the candidate planted
    with pytest.raises(tracing.TraceReadError, match="could not be opened"):
        tracing.read_segments(tmp_path, ["judge-trace-0.json"])
    os.remove(tmp_path / "judge-trace-0.json")
    os.mkfifo(tmp_path / "judge-trace-0.json")
    with pytest.raises(tracing.TraceReadError, match="not a regular file"):
        tracing.read_segments(tmp_path, ["judge-trace-0.json"])


class _Finished(phases.Execution):
    """An execution whose child has finished its trace: its `trace_end` reply is given, its files are real."""

    reply: msg.TraceEndReply

    def ask(self, command, model, step, timeout_s):  # noqa: ANN001, ANN201 - Execution.ask's signature
        assert isinstance(command, msg.TraceEnd) and model is msg.TraceEndReply
        return self.reply, None


def _finished(tmp_path: Path, text: str, calls: int) -> _Finished:
    (tmp_path / "judge-trace-0.json").write_text(text)
    run = _Finished(task=get_task("kl_div"), device="cuda:0", config=JudgeConfig(), shape=(8, 64), stages={})
    run.reply = msg.TraceEndReply(op="trace_end", ok=True, files=["judge-trace-0.json"], calls=calls,
                                  canaries=2 * calls)
    run.work_dir, run.trace_probe, run.trace_key, run.traced_batches = tmp_path, "available", KEY, [calls]
    return run


def test_the_parent_reads_the_childs_file_into_the_verdict_details(tmp_path):
    details: dict = {}
    _finished(tmp_path, honest(calls=2).text(), 2).check_trace(details)
    assert details["trace"]["status"] == "clean" and details["trace"]["segments"] == 1
    assert details["trace"]["per_call"]["launches"] == [1, 1]


def test_a_cut_file_read_by_the_parent_is_tamper_detected(tmp_path):
    run = _finished(tmp_path, honest(calls=2).text(), 3)  # the parent ran 3 calls: the third's canaries are missing
    details: dict = {}
    with pytest.raises(phases._Stop) as stop:
        run.check_trace(details)
    assert stop.value.status is Status.TAMPER_DETECTED and stop.value.details["rule"] == "canaries"
    assert stop.value.diagnosis.startswith("kernel trace: the trace's canaries are missing or out of order: 4 of 6")
    run.reply = msg.TraceEndReply(op="trace_end", ok=True, files=[], calls=0, canaries=0, recorder_error="stopped")
    with pytest.raises(phases._Stop) as stop:
        run.check_trace({})
    assert stop.value.details["rule"] == "trace_cut" and "the recorder said: stopped" in stop.value.diagnosis


def test_an_unavailable_recorder_applies_no_rule(tmp_path):
    run = _finished(tmp_path, "not even json", 2)
    run.trace_probe = "unavailable: the profiler recorded no device copy (no CUPTI activity on this host)"
    details: dict = {}
    run.check_trace(details)
    assert details["trace"]["status"] == "unavailable" and "no CUPTI" in details["trace"]["reason"]


def test_the_trace_is_off_unless_asked_for():
    # off unless asked for: its device time per candidate on an H100 (docs/results/trace-h100-2026-11-26.md)
    assert not JudgeConfig(trace=None).traces(cuda=True) and not JudgeConfig(trace=None).traces(cuda=False)
    assert JudgeConfig(trace=True).traces(cuda=False) and not JudgeConfig(trace=False).traces(cuda=True)
