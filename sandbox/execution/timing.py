"""Measuring calls on one device, in the manner of triton.testing.do_bench, a batch of fresh calls at a time.

Each timed call has inputs from a seed drawn for it alone (see sandbox/execution/phases.py), so calls cannot be
repeated on one input set as do_bench does. Instead a batch of calls, each with its own resident input
set, runs back to back between two device-wide synchronisations (`time_batch`):

- CPU (`time_cpu_batch`): before each call, flush the cache; the host clock around each call.
- GPU (`time_cuda_batch`): a lead of queued flushes first (below), then before each call, queue an L2
  flush (zero a buffer larger than the L2, so no call runs on warm data), then a start event, the call,
  an end event; one device-wide synchronisation after the last call. The device never waits for the
  host: while it flushes or runs one call, the host is already launching the next, so launch latency is
  not timed (measured on an H100, 2026-11-23: a lone call between synchronisations read 4-90% slower
  than the same kernel queued, docs/benchmarks.md). Events on the current stream are precise but blind
  to work on another stream or thread; the host clock across the batch, ended by a device-wide
  synchronisation, sees all of it. When the host saw clearly more than the events (`HIDDEN_WORK_RATIO`),
  each call's time is the host's share.
- The lead (`LEAD_MS` of flushes, untimed, before the first call's own flush): without it the first call
  of a batch had only its own flush (~0.09 ms on an H100) to cover the host's launch of that call, and
  read ~2.5% slower than the rest of its batch on kl_div_fast, with 3-4x their spread (H100, 2026-11-25,
  docs/benchmarks.md): with three calls a batch, that first call's noise decided when the timing could
  stop. With the lead, 1.0014 of the rest on the same kernels, and timing stopped early in 20 of 20 runs
  (6 of 12 without). The lead is more of the flush itself: a kernel on every SM that saturates the memory bus, so work
  hidden under it (a native thread's) slows it, which the host clock sees like any hidden work.

The batch's claim is the mean of its calls, not the median: the calls of a batch are all armed before
the first runs, so a candidate could find every input set and do the whole batch's work in its first
call; the mean is the same however the work is shifted between calls.

`time_calls` does the same for the trusted baselines, so candidates and baselines are timed alike.
Every function this module calls is bound at import (`_perf_counter`, `_cuda_synchronize`, `_Event`),
which happens before candidate code is imported in the child; the child verifies they are unchanged.

What a batch measures is out of the candidate's reach while it runs (issue 25): the clock's state is read once,
before the first call (`ClockState`), so an attribute set on the clock instance from a frame the candidate
walked to changes nothing this batch measures, and is reported (`BatchTime.tampered`); the calls and their
events are tuples, which no frame's reader can edit in place; events re-recorded out of order are reported.
The child's `Keeper` (sandbox/execution/window.py) copies each call's output inside the window, so work a candidate
defers past the batch's last event cannot change what is reported.
"""

from __future__ import annotations

import math
import os
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

import numpy as np
import torch

_perf_counter = time.perf_counter
_cuda_synchronize = torch.cuda.synchronize
_Event = torch.cuda.Event
_elapsed_time = torch.cuda.Event.elapsed_time
_record = torch.cuda.Event.record

METHOD_VERSION = 6
"""Bumped whenever the way calls are timed changes: cached baselines from another method are re-measured.
3: every call stands alone between device-wide synchronisations (was: a batch of events).
4: batches of calls queued back to back, each behind its own flush; a batch's mean is its claim.
5: a lead of queued flushes before each batch's first call.
6: the clock makes its device current (baselines of cuda:N, N > 0, had been timed on cuda:0's stream)."""
L2_FLUSH_BYTES = 256 << 20
"""Larger than any current L2 (50 MB on H100, 60 MB on H200): zeroing it evicts the inputs."""
CPU_FLUSH_BYTES = 16 << 20
"""About a last-level cache's worth on the CI machines; the CPU profile exists to test the pipeline, and a
bigger flush would dwarf the CPU-sized calls it separates."""

LEAD_MS = 0.5
"""Device time queued ahead of a batch's first call (whole flushes, at least one): ~5 flushes of ~0.09 ms on
an H100, while the host needs ~5 us to queue each; the rest covers the host's launch of the first call (tens
of microseconds for these candidates, more on a loaded host). `JUDGE_TIMING_LEAD_MS` overrides it (0: none),
for measuring what it changes."""

TRACED_LEAD_MS = 5.0
"""The lead while the kernel trace records (sandbox/child/recorder.py): CUPTI costs each launch host time, so a call
of several short launches let the host fall behind the device inside the timing events with `LEAD_MS`: a Triton
cross-entropy (four launches in 0.25 ms) +4.46% with the trace on an H100, spread 18% over three rounds; with 5 ms,
+0.54%, spread 0.43% (docs/results/trace-h100-2026-11-26.md). ~50 more flushes a batch: ~5 ms of device time."""

HIDDEN_WORK_RATIO = 1.25
"""A call whose host time exceeds 125% of its events (plus `HIDDEN_WORK_SLACK_MS`) did work the events
did not see: another stream, another thread, or host-side work between kernels."""
HIDDEN_WORK_SLACK_MS = 0.05
"""Host-side noise one synchronised call may show beyond its events (wake-up after the synchronisation)."""
EVENT_RESOLUTION_MS = 0.001
"""CUDA events resolve about half a microsecond: a negative span shorter than this is the timer, not a re-record."""


@dataclass(frozen=True, kw_only=True)
class CallTime:
    """One timed call. `time_ms` is what the judge reports, the rest explains it."""

    time_ms: float
    host_ms: float
    """The host clock around the call (flush and calibrated clock overhead removed)."""
    event_ms: float | None
    """CUDA events around the call on the current stream; None on the CPU."""
    hidden_work: bool
    result: object


@dataclass(frozen=True, kw_only=True)
class CallTimes:
    """Repeated calls of one callable (the trusted baselines)."""

    times_ms: list[float]
    hidden_work: bool


@dataclass(frozen=True, kw_only=True)
class ClockState:
    """Everything a batch reads of its clock, read once before the batch's first call."""

    device: torch.device
    is_cuda: bool
    flush: Callable[[], object]
    flush_span: tuple[int, int]
    """The flush buffer's address and size: a buffer shrunk in place flushes nothing."""
    host_overhead_ms: float
    flush_ms: float
    lead_flushes: int


class DeviceClock:
    """Flush, synchronise and timestamp on one device."""

    def __init__(self, device: torch.device, lead_ms: float | None = None, *, traced: bool = False) -> None:
        """`lead_ms`: the lead before each GPU batch (default `JUDGE_TIMING_LEAD_MS`, else `TRACED_LEAD_MS` where the
        kernel trace records (`traced`), else `LEAD_MS`)."""
        self.device = device
        self.is_cuda = device.type == "cuda"
        if self.is_cuda and device.index is not None:
            # Events record on the current device's stream. A trusted measurement of cuda:1 in a process whose
            # current device was still cuda:0 timed cuda:0's idle stream: on a two-GPU H100 host (2026-11-25) the
            # bandwidth probe failed once ("Both events must be completed") and then cached 2.04 TB/s for 3.0,
            # and every honest fast kl_div kernel was judged tamper_detected (faster than speed-of-light).
            torch.cuda.set_device(device)
        size = L2_FLUSH_BYTES if self.is_cuda else CPU_FLUSH_BYTES
        self._flush = torch.empty(size // 4, dtype=torch.int32, device=device)
        self.host_overhead_ms = 0.0
        self.flush_ms = 0.0
        default = TRACED_LEAD_MS if traced else LEAD_MS
        self.lead_ms = lead_ms if lead_ms is not None else float(os.environ.get("JUDGE_TIMING_LEAD_MS", default))
        self.lead_flushes = 0
        """Flushes queued ahead of each batch; set by `calibrate` from the measured `flush_ms`."""
        self.flush_span = (self._flush.data_ptr(), self._flush.numel())

    def state(self) -> ClockState:
        return ClockState(device=self.device, is_cuda=self.is_cuda, flush=self.flush,
                          flush_span=(self._flush.data_ptr(), self._flush.numel()),
                          host_overhead_ms=self.host_overhead_ms, flush_ms=self.flush_ms,
                          lead_flushes=self.lead_flushes)

    def changes(self, state: ClockState) -> tuple[str, ...]:
        """What differs from `state` (read before a batch) now, and what the flush buffer lost since it was made."""
        changed = ()
        if self.state() != state:
            changed += ("the timing clock (an attribute of its instance changed during the batch)",)
        if state.flush_span != self.flush_span:
            changed += ("the timing clock's flush buffer (replaced or resized)",)
        return changed

    def synchronize(self) -> None:
        if self.is_cuda:
            _cuda_synchronize(self.device)

    def flush(self) -> None:
        self._flush.zero_()

    def time_call(self, fn: Callable[[], object]) -> tuple[float, object]:
        """One flushed call between device-wide synchronisations, by the host clock, minus the overhead."""
        self.flush()
        self.synchronize()
        t0 = _perf_counter()
        result = fn()
        self.synchronize()
        return (_perf_counter() - t0) * 1e3 - self.host_overhead_ms, result

    def calibrate(self, reps: int = 50) -> float:
        """Measure what the clocks add around a trivial call; run before any candidate code exists."""
        probe = torch.zeros(4, device=self.device)
        self.host_overhead_ms = 0.0
        overheads = [self.time_call(lambda: probe.add_(1))[0] for _ in range(reps)]
        self.host_overhead_ms = statistics.median(overheads) if self.is_cuda else 0.0
        if self.is_cuda:
            flushes = []
            for _ in range(10):
                start, end = _Event(enable_timing=True), _Event(enable_timing=True)
                _record(start)
                self.flush()
                _record(end)
                self.synchronize()
                flushes.append(_elapsed_time(start, end))
            self.flush_ms = statistics.median(flushes)
            self.lead_flushes = math.ceil(self.lead_ms / self.flush_ms) if self.lead_ms > 0 and self.flush_ms > 0 else 0
        return self.host_overhead_ms


@dataclass(frozen=True, kw_only=True)
class BatchTime:
    """One batch of timed calls. `times_ms` are what the judge reports, the rest explains them."""

    times_ms: list[float]
    host_ms: float
    """The host clock around the whole batch (flushes and calibrated clock overhead removed)."""
    events_ms: list[float] | None
    """CUDA events around each call on the current stream; None on the CPU."""
    hidden_work: bool
    results: list[object]
    kept: tuple[object, ...] = ()
    """What the batch's `Keeper` kept of each call inside the window (empty without one)."""
    tampered: tuple[str, ...] = ()
    """The harness's own timing state found edited during the batch (clock, events)."""

    @property
    def mean_ms(self) -> float:
        return sum(self.times_ms) / len(self.times_ms)


ARMED_BYTES = 8 << 30
"""Device memory the input sets of one GPU batch may take together: 4 official kl_div sets (2 GiB each),
8 cross_entropy sets (0.5 GiB); the H100 has 80 GB, and a candidate's own buffers need room beside them."""
MAX_BATCH = 8
"""Calls per batch at most: enough to keep the device busy while the host launches the next call; more
only adds input sets that all sit in memory."""


def batch_size(device: torch.device, bytes_per_call: int, armed_bytes: int = ARMED_BYTES) -> int:
    """Calls per timed batch: 1 on the CPU (a flush there cannot overlap a call, so batching buys nothing);
    on a GPU as many input sets as fit in `armed_bytes`, at most MAX_BATCH."""
    if device.type != "cuda":
        return 1
    return max(1, min(MAX_BATCH, armed_bytes // max(bytes_per_call, 1)))


class Keeper(Protocol):
    """What the caller keeps of each call before the batch's window closes (the child's:
    sandbox/execution/window.py)."""

    def take(self, index: int, result: object) -> None:
        """Copy call `index`'s result: on the CPU inside that call's timed interval, on a GPU after the batch's
        last end event and before the device-wide synchronisation that ends the host clock."""

    def close(self) -> tuple[object, ...]:
        """Once, after the last `take` and still inside the window: what was kept, fixed."""


class Marks(Protocol):
    """What the child's kernel trace recorder marks in a GPU batch (sandbox/child/recorder.py): a canary before and
    after each call, outside its timing events. Nothing else: every mark is host work between the calls, and the
    device's windows come from the canaries alone."""

    def canary(self) -> None: ...


def time_cpu_batch(clock: DeviceClock, calls: list[Callable[[], object]], *, first_flushed: bool = False,
                   keep: Keeper | None = None) -> BatchTime:
    """The host clock around each call, each after evicting the cache (the flush is not timed). A caller that
    wants the first flush outside a window around the whole batch (the child's `go`) flushes first and says so.
    `keep` takes each call's result inside its timed interval."""
    state, calls, perf = clock.state(), tuple(calls), _perf_counter
    times, results = [], []
    for i, fn in enumerate(calls):
        if i or not first_flushed:
            state.flush()
        t0 = perf()
        result = fn()
        if keep is not None:
            keep.take(i, result)
        times.append((perf() - t0) * 1e3)
        results.append(result)
    kept = keep.close() if keep is not None else ()
    return BatchTime(times_ms=times, host_ms=sum(times), events_ms=None, hidden_work=False, results=results, kept=kept,
                     tampered=clock.changes(state))


def time_cuda_batch(clock: DeviceClock, calls: list[Callable[[], object]], keep: Keeper | None = None,
                    marks: Marks | None = None) -> BatchTime:
    """Events around each call behind its own queued L2 flush, checked against the host clock (module doc).
    `keep` takes every result after the last end event, inside the host clock's window. `marks` (the kernel trace):
    a canary before each call's start event and after its end event (queued outside the events: device time no
    call is charged)."""
    state, calls = clock.state(), tuple(calls)
    perf, sync, record, elapsed = _perf_counter, _cuda_synchronize, _record, _elapsed_time
    events = tuple((_Event(enable_timing=True), _Event(enable_timing=True)) for _ in calls)
    results = []
    sync(state.device)
    t0 = perf()
    for _ in range(state.lead_flushes):
        state.flush()
    for fn, (start, end) in zip(calls, events):
        state.flush()
        if marks is not None:
            marks.canary()
        record(start)
        results.append(fn())
        record(end)
        if marks is not None:
            marks.canary()
    kept = ()
    if keep is not None:
        for i, result in enumerate(results):
            keep.take(i, result)
        kept = keep.close()
    sync(state.device)
    flushes = len(calls) + state.lead_flushes
    host_ms = max((perf() - t0) * 1e3 - state.host_overhead_ms - flushes * state.flush_ms, 0.0)
    events_ms = [elapsed(start, end) for start, end in events]
    gaps = [elapsed(events[i][1], events[i + 1][0]) for i in range(len(events) - 1)]
    hidden = host_ms > HIDDEN_WORK_RATIO * sum(events_ms) + HIDDEN_WORK_SLACK_MS
    times = [host_ms / len(calls)] * len(calls) if hidden else events_ms
    tampered = clock.changes(state)
    if min(events_ms + gaps) < -EVENT_RESOLUTION_MS:
        tampered += ("the batch's timing events (recorded again, out of order, during the batch)",)
    return BatchTime(times_ms=times, host_ms=host_ms, events_ms=events_ms, hidden_work=hidden, results=results,
                     kept=kept, tampered=tampered)


def time_batch(clock: DeviceClock, calls: list[Callable[[], object]], *, cpu_flushed: bool = False,
               keep: Keeper | None = None, marks: Marks | None = None) -> BatchTime:
    """The strategy for the clock's device (`cpu_flushed`: see `time_cpu_batch`; a GPU queues its flushes). `marks`:
    a GPU's alone (the CPU has no device activity to mark, and a mark's host time between calls is not overlapped
    there: it would lengthen the parent's window around each call, not the call)."""
    if clock.is_cuda:
        return time_cuda_batch(clock, calls, keep, marks)
    return time_cpu_batch(clock, calls, first_flushed=cpu_flushed, keep=keep)


def time_one_call(clock: DeviceClock, fn: Callable[[], object], *, cpu_flushed: bool = False) -> CallTime:
    """A batch of one call."""
    timed = time_batch(clock, [fn], cpu_flushed=cpu_flushed)
    events = timed.events_ms[0] if timed.events_ms else None
    return CallTime(time_ms=timed.times_ms[0], host_ms=timed.host_ms, event_ms=events, hidden_work=timed.hidden_work,
                    result=timed.results[0])


def time_calls(clock: DeviceClock, fn: Callable[[], object], reps: int, warmup: int, batch: int = 1) -> CallTimes:
    """Warm up, then time `reps` calls of `fn` in batches of `batch` (the baselines; sizes the candidate's plan).
    Each call's time is its batch's mean, as for the candidate."""
    for _ in range(warmup):
        fn()
    clock.synchronize()
    times: list[float] = []
    hidden = False
    while len(times) < reps:
        timed = time_batch(clock, [fn] * min(batch, reps - len(times)))
        times += [timed.mean_ms] * len(timed.times_ms)
        hidden = hidden or timed.hidden_work
    return CallTimes(times_ms=times, hidden_work=hidden)


def plan_reps(estimate_ms: float, budget_ms: float, min_reps: int, max_reps: int) -> tuple[int, int]:
    """(reps, warmup) from a per-call estimate: spend ~budget_ms timing, ~10% of it warming up (3 to 10 calls:
    each timed call of the candidate is a round trip with fresh inputs, so warm-up is for caches and JITs)."""
    per_call = max(estimate_ms, 1e-3)
    reps = int(min(max(budget_ms / per_call, min_reps), max_reps))
    warmup = int(min(max(0.1 * budget_ms / per_call, 3), 10))
    return reps, warmup


def summarize(times_ms: list[float], *, seed: int = 0,
              resamples: int = 1000) -> dict[str, float | int | tuple[float, float]]:
    """Median, quartiles, min, mean and a bootstrap 95% interval of the median."""
    arr = np.asarray(times_ms, dtype=np.float64)
    rng = np.random.default_rng(seed)
    medians = np.median(rng.choice(arr, size=(resamples, arr.size), replace=True), axis=1)
    return {
        "median_ms": float(np.median(arr)),
        "q25_ms": float(np.quantile(arr, 0.25)),
        "q75_ms": float(np.quantile(arr, 0.75)),
        "min_ms": float(arr.min()),
        "mean_ms": float(arr.mean()),
        "reps": int(arr.size),
        "ci95_ms": (float(np.quantile(medians, 0.025)), float(np.quantile(medians, 0.975))),
    }
