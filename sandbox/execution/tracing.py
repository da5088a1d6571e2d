"""The parent's side of the kernel trace (issue 28): read what the child's recorder wrote, check that it was not cut,
and apply the rules of sandbox/shared/trace.py to the timing phase.

Trusted process. Everything read here was written by the untrusted child (sandbox/child/recorder.py): the file names
it claims are checked against the recorder's own pattern, each file is opened without following a link, must be a
regular file, and all of them together are read up to `MAX_TRACE_BYTES`. The record itself is never trusted,
only checked for completeness: the canaries the parent expects (two per timed call, sizes drawn from a key made
here per candidate) must all be in it, in order. The batches (how many calls each ran) are the parent's own count,
not the child's: they say which gaps between calls hold only the harness's flush. A trace that is absent,
unreadable, truncated or missing a canary, once the recorder's probe said this host records device work, is
tampering: CUDA work ran, so a complete record exists unless something cut it.

Outcomes (`TraceOutcome.status`): "off" (JudgeConfig.trace), "unavailable" (the CPU, or a host whose probe found
no device activity: no rule applies and the verdict is unchanged), "clean" (every rule passed; the per-call summary
is in the verdict's details), "refused" (a rule broken: the verdict is tamper_detected with the rule's message).
"""

from __future__ import annotations

import os
import re
import secrets
import stat
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sandbox.shared import trace

SEGMENT_NAME = re.compile(r"judge-trace-(\d{1,3})\.json")
"""The recorder's segment files (sandbox/child/recorder.py SEGMENT), and no other name."""
KEY_BYTES = 16


class TraceReadError(ValueError):
    """The child's record could not be read as the recorder writes it (a link, not a file, too large, a bad name)."""


@dataclass
class TraceOutcome:
    """What the trace says about one candidate's timing; `details` goes to `Verdict.details["trace"]`."""

    status: str
    """"off", "unavailable", "clean" or "refused"."""
    rule: str | None = None
    message: str = ""
    details: dict[str, Any] = field(default_factory=dict)

    @property
    def refused(self) -> bool:
        return self.status == "refused"


def new_key() -> bytes:
    """A candidate's canary key: drawn here, sent to the child at `load`."""
    return secrets.token_bytes(KEY_BYTES)


def read_segments(work_dir: Path, names: list[str], limit: int = trace.MAX_TRACE_BYTES) -> list[str]:
    """The segments' texts, in order, read without following links and at most `limit` bytes in all."""
    texts, total = [], 0
    for i, name in enumerate(names):
        match = SEGMENT_NAME.fullmatch(name)
        if match is None or int(match.group(1)) != i:
            raise TraceReadError(f"segment {i} is named {name[:64]!r}, not {SEGMENT_NAME.pattern}")
        try:
            fd = os.open(work_dir / name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
        except OSError as exc:
            raise TraceReadError(f"segment {name} could not be opened: {exc.strerror}") from None
        with os.fdopen(fd, "rb") as fh:
            info = os.fstat(fh.fileno())
            if not stat.S_ISREG(info.st_mode):
                raise TraceReadError(f"segment {name} is not a regular file")
            total += info.st_size
            if total > limit:
                raise TraceReadError(f"the trace is over {limit} bytes")
            data = fh.read(limit + 1 - (total - info.st_size))
        texts.append(data.decode("utf-8", errors="replace"))
    return texts


def parse_segments(texts: list[str]) -> list[trace.Record]:
    """Every segment's device records, merged in time order (the annotations a trace might hold are not read: the
    windows come from the canaries, sandbox/shared/trace.py)."""
    records: list[trace.Record] = []
    for text in texts:
        records += trace.parse_chrome_trace(text)[0]
    records.sort(key=lambda r: (r.start_ns, r.end_ns))
    return records


def as_warmup(windows: list[trace.Window], warmup_calls: set[int]) -> list[trace.Window]:
    """Warm-up calls are the harness's, not timed: their first-call costs (a JIT, an autotuner) differ by design."""
    out = []
    for w in windows:
        index = w.label[len(trace.TIMED):]
        if w.timed and index.isdigit() and int(index) in warmup_calls:
            w = trace.Window(f"{trace.HARNESS}warmup/{index}", w.start_ns, w.end_ns)
        out.append(w)
    return out


def judge(texts: list[str], key: bytes, batches: list[int], warmup_calls: set[int]) -> TraceOutcome:
    """The rules over a complete record of the timed calls (`batches`: how many calls each batch ran, in order,
    warm-up included), or why it is not complete."""
    try:
        records = parse_segments(texts)
    except trace.TraceParseError as exc:
        return _refused("trace_cut", f"the kernel trace could not be read after CUDA work ran ({exc}): the "
                        "record of the timed calls was cut or rewritten", {})
    calls = sum(batches)
    expected = [trace.canary_bytes(key, i) for i in range(2 * calls)]
    canaries = trace.canary_records(records, expected)
    found = [r.bytes for r in canaries]
    summary = {"records": len(records), "canaries": len(found)}
    cut = trace.canary_finding(found, expected)
    if cut is not None:
        return _refused(cut.rule, cut.message, summary)
    # The calls' windows are the canaries': everything a call ran lies between them, whatever thread launched it
    # (an autograd engine's backward), and its timing events lie between them too.
    windows = as_warmup(sorted(trace.call_windows(canaries) + trace.harness_windows(records, canaries, batches),
                               key=lambda w: w.start_ns), warmup_calls)
    canary_streams = {r.stream for r in canaries}  # the timing's own stream: the canaries are queued on it
    labels = [f"{trace.TIMED}{i}" for i in range(calls) if i not in warmup_calls]
    calls_summary = trace.per_call(records, windows)
    summary.update(_per_call_details(calls_summary, labels), timed_streams=sorted(canary_streams))
    # Work of a call on another stream, between its canaries, was bracketed by its events (they lie between the
    # canaries too): reported, not refused. Work past its closing canary is outside every window.
    findings = trace.outside_windows(records, windows, canary_streams)
    summary["other_streams"] = sum(len(f.records) for f in findings if f.rule == "unseen_stream")
    findings = [f for f in findings if f.rule != "unseen_stream"] + trace.differing_calls(records, windows, labels)
    if findings:
        return _refused(findings[0].rule, findings[0].message, summary)
    return TraceOutcome("clean", details={"status": "clean", **summary})


def _per_call_details(calls: list[trace.CallSummary], labels: list[str]) -> dict[str, Any]:
    """Rule (c), compact: launches, copies, bytes and kernel time of each timed call, and the common kernels."""
    by_label = {c.window: c for c in calls}
    ordered = [by_label.get(label, trace.CallSummary(label)) for label in labels]
    first = next((c for c in ordered if c.kernels), None)
    return {"per_call": {"launches": [c.launches for c in ordered], "copies": [c.copies for c in ordered],
                         "bytes_moved": [c.bytes_moved for c in ordered],
                         "kernel_us": [round(c.kernel_ns / 1e3, 3) for c in ordered]},
            "kernels": [{"name": name[:200], "grid": grid, "block": block}
                        for name, grid, block in (first.kernels[:16] if first else [])]}


def _refused(rule: str, message: str, summary: dict[str, Any]) -> TraceOutcome:
    return TraceOutcome("refused", rule=rule, message=message,
                        details={"status": "refused", "rule": rule, **summary})
