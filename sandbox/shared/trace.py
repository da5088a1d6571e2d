"""Rules over a recorded kernel trace (issue 28): every kernel, memcpy and memset of the child's life, checked
against the windows the timing knows about.

A trace is a list of `Record`s (kind, name, stream, start/end in ns, grid, block, bytes): the device activity of
the child's life and nothing of its host side. The recorder asks CUPTI for device activity alone (no operator
callbacks, no annotations): on an H100 the host-side profiler cost a 0.13 ms call ~0.25 ms of host time, enough to
starve the device inside the timing events (docs/results/trace-overhead-h100-2026-11-26.md). So every window the
rules use comes from the device timeline itself, from the canaries the harness queues on the timing stream:

(d) `canary_records`/`canary_finding`: the canaries (device copies of sizes drawn from a per-candidate key,
    `canary_bytes`, one before and one after every timed call, outside its timing events) must all be there, in
    order; `call_windows` then bounds each timed call by its two canaries;
(a) `outside_windows`: during a batch of timed calls (its first canary to its last), device work that is inside
    no call's window and is not the flush the harness queues between two calls (`harness_windows`: exactly one per
    gap, the same kernel in every gap) is refused (a side stream or thread doing work the events around the calls
    may not bracket, or work deferred past a call's window); a call's work on a stream the timing did not see is
    reported;
(b) `differing_calls`: timed calls whose kernels (name, grid, block, in order) differ from the most common
    sequence are flagged (a candidate that behaves differently once it knows it is timed);
(c) `per_call`: launches, memcpy/memset count, bytes moved and kernel time of each timed call.

`parse_chrome_trace` reads torch's profiler (kineto) export: `{"traceEvents": [...]}`, complete events
(`"ph": "X"`) with `ts`/`dur` in microseconds, categories `kernel`, `gpu_memcpy`, `gpu_memset` (args `stream`,
`grid`, `block`, `bytes`). Times are read exactly (kineto writes epoch-based microseconds with three decimals, or
times relative to `baseTimeNanoseconds`). It also returns the `gpu_user_annotation` spans a trace with host
activity holds (`judge/...` labels: the recorded fixtures of tests/fixtures/trace); the judge's record has none and
the parent uses none: a window a process could name for itself is not a window the judge trusts.

Recorded by the judge in the child (sandbox/child/recorder.py) and judged in the parent (sandbox/execution/tracing.py).
CUPTI runs inside the process it observes, so a candidate's native code can disable or unsubscribe it; the
canaries make the record tamper-evident, which is what the judge needs: it never has to trust the record, only
notice that it was cut. A CUPTI activity library injected before Python starts (CUDA_INJECTION64_PATH, judge-built,
read-only in the sandbox, streaming to a pipe the launcher opened) would move the recorder further out of reach
(docs/threat-model.md).
"""

from __future__ import annotations

import hashlib
import json
from bisect import bisect_left, bisect_right
from collections import Counter
from decimal import Decimal
from dataclasses import dataclass, field
from typing import Any, Literal

Kind = Literal["kernel", "memcpy", "memset"]
TIMED = "judge/timed/"
HARNESS = "judge/harness/"
_CATEGORIES: dict[str, Kind] = {"kernel": "kernel", "gpu_memcpy": "memcpy", "gpu_memset": "memset"}
MAX_TRACE_BYTES = 256 << 20
"""A child's whole life at the official size: tens of thousands of records, a few MiB of JSON each 10,000."""
MAX_CANARY_BYTES = 1 << 16
"""A canary copies 1..65,536 bytes: a device-to-device copy of that size takes ~2-3 us, outside the timing events."""


class TraceParseError(ValueError):
    """Not a chrome trace torch's profiler writes (no traceEvents list, events without times)."""


@dataclass(frozen=True)
class Record:
    kind: Kind
    name: str
    stream: int
    start_ns: int
    end_ns: int
    grid: tuple[int, int, int] | None = None
    block: tuple[int, int, int] | None = None
    bytes: int = 0
    """memcpy/memset: bytes moved (0 for a kernel: its traffic is not in the trace)."""


@dataclass(frozen=True)
class Window:
    label: str
    """`judge/timed/<i>` or `judge/harness/<what>`."""
    start_ns: int
    end_ns: int

    @property
    def timed(self) -> bool:
        return self.label.startswith(TIMED)

    def holds(self, record: Record) -> bool:
        return self.start_ns <= record.start_ns and record.end_ns <= self.end_ns


@dataclass(frozen=True)
class Finding:
    rule: str
    """"outside_windows", "unseen_stream" or "differing_call"."""
    message: str
    records: tuple[Record, ...] = ()


@dataclass
class CallSummary:
    window: str
    launches: int = 0
    copies: int = 0
    bytes_moved: int = 0
    kernel_ns: int = 0
    kernels: list[tuple[str, tuple[int, int, int] | None, tuple[int, int, int] | None]] = field(default_factory=list)


def _ns(us: Any) -> int:
    """Microseconds (read as Decimal: a float of an epoch-based time in us has no room for its ns) -> ns."""
    return int((Decimal(str(us)) * 1000).to_integral_value())


def _dim3(value: Any) -> tuple[int, int, int] | None:
    if isinstance(value, list) and len(value) == 3 and all(isinstance(v, int) for v in value):
        return (value[0], value[1], value[2])
    return None


def parse_chrome_trace(text: str) -> tuple[list[Record], list[Window]]:
    """torch.profiler's `export_chrome_trace` JSON -> device records (by start time) and the judge's windows."""
    if len(text) > MAX_TRACE_BYTES:
        raise TraceParseError(f"the trace is over {MAX_TRACE_BYTES} bytes")
    try:
        events = json.loads(text, parse_float=Decimal)["traceEvents"]
    except (ValueError, KeyError, TypeError) as exc:
        raise TraceParseError(f"not a chrome trace: {exc}") from None
    if not isinstance(events, list):
        raise TraceParseError("traceEvents is not a list")
    records, windows = [], []
    for event in events:
        if not isinstance(event, dict) or event.get("ph") != "X":
            continue
        cat, name, args = event.get("cat"), str(event.get("name", "")), event.get("args") or {}
        try:
            start, end = _ns(event["ts"]), _ns(event["ts"]) + _ns(event["dur"])
        except (KeyError, TypeError, ValueError, ArithmeticError):
            raise TraceParseError(f"event {name!r} has no ts/dur") from None
        if cat in _CATEGORIES:
            records.append(Record(kind=_CATEGORIES[cat], name=name, stream=int(args.get("stream", -1)),
                                  start_ns=start, end_ns=end, grid=_dim3(args.get("grid")),
                                  block=_dim3(args.get("block")), bytes=int(args.get("bytes", 0) or 0)))
        elif cat == "gpu_user_annotation" and name.startswith((TIMED, HARNESS)):
            windows.append(Window(name, start, end))
    records.sort(key=lambda r: (r.start_ns, r.end_ns))
    windows.sort(key=lambda w: w.start_ns)
    return records, windows


def canary_bytes(key: bytes, index: int) -> int:
    """The size of canary `index` (two per timed call, start then end) under a run's key: the parent and the
    child's recorder draw the same sequence; nothing else can without the key."""
    digest = hashlib.blake2b(index.to_bytes(8, "little"), key=key, digest_size=8).digest()
    return 1 + int.from_bytes(digest, "little") % MAX_CANARY_BYTES


def canary_records(records: list[Record], expected: list[int]) -> list[Record]:
    """The canaries, matched in order: for each expected size, the first device copy of that size after the last
    one matched. A copy of the candidate's own that happens to have the next size is taken instead of the real
    canary (one small copy in 65,536 of a given size), which moves a call's window by a few microseconds and hides
    nothing: a canary the record lacks is still missing, whatever else matched."""
    copies = iter(r for r in records if r.kind == "memcpy")
    found = []
    for size in expected:
        match = next((r for r in copies if r.bytes == size), None)
        if match is None:
            break
        found.append(match)
    return found


def call_windows(canaries: list[Record]) -> list[Window]:
    """Each timed call's window from its two canaries (start, end): from the end of the first to the start of the
    second, on the device. Everything the call ran lies between them, whatever thread launched it (an autograd
    engine's backward is not correlated to the caller's annotation), and its timing events lie between them too."""
    return [Window(f"{TIMED}{k}", canaries[2 * k].end_ns, canaries[2 * k + 1].start_ns)
            for k in range(len(canaries) // 2)]


def canary_finding(found: list[int], expected: list[int]) -> Finding | None:
    """Rule (d): every expected canary must be in the record, in order (`canary_records` stops at the first it
    cannot find after the ones before it)."""
    if found == expected:
        return None
    return Finding("canaries", f"the trace's canaries are missing or out of order: {len(found)} of {len(expected)} "
                   f"found in order, canary {len(found)} is not (the record of the timed calls was cut or rewritten)")


def harness_windows(records: list[Record], canaries: list[Record], batches: list[int]) -> list[Window]:
    """The harness's own windows around the calls (`batches`: the calls of each batch, in order): each canary's
    copy; inside a batch, the one flush `time_cuda_batch` queues between a call's closing canary and the next one's
    opening canary, on the timing stream, the same kernel in every gap (the most common last record there; a gap
    without it gets no window), each window exactly that record's span; between two batches, the whole gap (the
    harness inspects, keeps and arms there, and, inside `go`, queues the batch's lead and makes every call's inputs
    before the first call: sandbox/child/timing.py). Anything else in a gap inside a batch is outside every
    window. Work a candidate's hook does while the inputs are made lies in that last gap and is not the trace's to
    find: its device time is what sandbox/execution/plausibility.py's `unattributed_work` charges, from the timing
    events, traced or not."""
    windows = [Window(HARNESS + "canary", r.start_ns, r.end_ns) for r in canaries]
    stream, gaps, call = canaries[0].stream if canaries else None, [], 0
    starts = [r.start_ns for r in records]  # records come by start time: each gap's are one slice
    for size in batches:
        for k in range(call, call + size - 1):
            start, end = canaries[2 * k + 1].end_ns, canaries[2 * k + 2].start_ns
            gaps.append([r for r in records[bisect_left(starts, start):bisect_right(starts, end)]
                         if r.end_ns <= end and r.stream == stream])
        if 2 * (call + size) < len(canaries):  # the harness's steps before the next batch
            windows.append(Window(HARNESS + "between-batches", canaries[2 * (call + size) - 1].end_ns,
                                  canaries[2 * (call + size)].start_ns))
        call += size
    # The flush is queued right before the next call's opening canary, so it is each gap's last record on the timing
    # stream: work the candidate left behind runs before it, and is refused whether or not every gap holds some.
    signature = Counter((gap[-1].kind, gap[-1].name, gap[-1].grid) for gap in gaps if gap).most_common(1)
    for gap in gaps:
        if gap and (gap[-1].kind, gap[-1].name, gap[-1].grid) == signature[0][0]:
            windows.append(Window(HARNESS + "flush", gap[-1].start_ns, gap[-1].end_ns))
    return windows


def timing_span(windows: list[Window]) -> tuple[int, int] | None:
    timed = [w for w in windows if w.timed]
    return (min(w.start_ns for w in timed), max(w.end_ns for w in timed)) if timed else None


def outside_windows(records: list[Record], windows: list[Window], timed_streams: set[int]) -> list[Finding]:
    """Rule (a): device work during the timing phase outside every window, or in a timed window on a stream the
    timing did not see."""
    span = timing_span(windows)
    if span is None:
        return []
    during = [r for r in records if r.end_ns > span[0] and r.start_ns < span[1]]
    stray = tuple(r for r in during if not any(w.holds(r) for w in windows))
    strays = {id(r) for r in stray}
    unseen = tuple(r for r in during if id(r) not in strays and r.stream not in timed_streams
                   and any(w.timed and w.holds(r) for w in windows))
    findings = []
    if stray:
        findings.append(Finding("outside_windows", f"{len(stray)} device operation(s) ran during the timing phase "
                                f"outside every timed call and harness step, the first: {stray[0].kind} "
                                f"{stray[0].name!r} on stream {stray[0].stream}", stray))
    if unseen:
        streams = sorted({r.stream for r in unseen})
        findings.append(Finding("unseen_stream", f"{len(unseen)} device operation(s) of timed calls ran on stream(s) "
                                f"{streams}, which the timing did not see (it saw {sorted(timed_streams)})", unseen))
    return findings


def per_call(records: list[Record], windows: list[Window]) -> list[CallSummary]:
    """Rule (c): each timed call's launches, copies, bytes moved and kernel time (records inside its window)."""
    summaries = []
    for window in (w for w in windows if w.timed):
        summary = CallSummary(window.label)
        for r in (r for r in records if window.holds(r)):
            if r.kind == "kernel":
                summary.launches += 1
                summary.kernel_ns += r.end_ns - r.start_ns
                summary.kernels.append((r.name, r.grid, r.block))
            else:
                summary.copies += 1
                summary.bytes_moved += r.bytes
        summaries.append(summary)
    return summaries


def differing_calls(records: list[Record], windows: list[Window], labels: list[str] | None = None) -> list[Finding]:
    """Rule (b): timed calls whose kernel sequence differs from the most common one (ties: the first seen).
    `labels`: every timed call that ran; one with no window launched no device work (an empty sequence)."""
    calls = per_call(records, windows)
    if labels is not None:
        seen = {c.window for c in calls}
        calls += [CallSummary(label) for label in labels if label not in seen]
    if len(calls) < 2:
        return []
    common, count = Counter(tuple(c.kernels) for c in calls).most_common(1)[0]
    if count == len(calls):
        return []
    odd = [c for c in calls if tuple(c.kernels) != common]
    first = odd[0]
    return [Finding("differing_call", f"{len(odd)} of {len(calls)} timed calls launched other kernels than the "
                    f"other {count}: {first.window} ran {[k[0] for k in first.kernels]}, the others "
                    f"{[k[0] for k in common]}")]


def check(records: list[Record], windows: list[Window], timed_streams: set[int]) -> list[Finding]:
    """Every rule: what a verdict would carry (rules (a) and (b)); rule (c) is reported, not judged."""
    return outside_windows(records, windows, timed_streams) + differing_calls(records, windows)
