"""Measuring calls on one device, in the manner of triton.testing.do_bench, a batch of fresh calls at a time.

Each timed call has inputs from a seed drawn for it alone (see sandbox/execution/phases.py), so calls cannot be
repeated on one input set as do_bench does. Instead a batch of calls runs back to back between two device-wide
synchronisations (`time_batch`), and **each call's inputs are made inside the batch, just before that call**
(`Call.make`): before its `make` runs, no value of a call's inputs exists in the process, so no code of the
candidate's, whatever runs it (a hook, a tracer, a finaliser, a native thread), can work on them outside the
measured batch. What the batch measures of each call:

- GPU (`time_cuda_batch`): a lead of queued flushes (zeroing a buffer larger than the L2), then every call's
  inputs made, then per call one more flush (so no call runs on warm data), a start event, the call, an end event;
  one device-wide synchronisation after the last call. Everything from the lead's first event to the first call's
  start event is the judge's own device work, of known length: the lead's and the first call's flushes (calibrated
  before the candidate exists) and the making of the inputs, which the parent times on its own device for the same
  seeds. Its device span (`made_ms`) is reported, and the parent charges whatever exceeds that known length to the
  calls (sandbox/execution/plausibility.py, `unattributed_work`): work a candidate's hook did while the inputs were
  being made is device time inside that span. The lead is sized so that the host has queued all of the making before
  the device reaches its end (`lead_flushes`): the span is then device time alone, never the host's launch latency.
  After the making, the host queues a flush and a call at a time, far faster than the device runs them, so the
  device never waits for the host inside a call (measured on an H100, 2026-11-23: a lone call between
  synchronisations read 4-90% slower than the same kernel queued, docs/benchmarks.md). Making each call's inputs
  just before it instead put the host's making on every call's path: cross_entropy's inputs take the host longer to
  queue (0.35-0.5 ms) than the device to make (0.32 ms), the host fell behind, and honest calls read up to 2.5x
  their time (H200, 2026-11-28).
  Events on the current stream are precise but blind to work on another stream or thread; the host clock across
  the batch, ended by a device-wide synchronisation, sees all of it. When the host saw clearly more than the
  events (`HIDDEN_WORK_RATIO`), each call's time is the host's share.
- CPU (`time_cpu_batch`): per call, the inputs made, the cache flushed, then the host clock around the call.
  The parent ranks the larger of that clock and the sandbox's CPU time that the kernel accounted (read by the
  parent itself, sandbox/execution/plausibility.py, `cpu_rank`), so a clock patched in the child buys nothing.

The batch's claim is the mean of its calls, not the median: the calls of a batch have their inputs made before the
first runs, so a candidate could find every input set and do the whole batch's work in its first call; the mean is
the same however the work is shifted between calls.

`time_calls` does the same for the trusted baselines (their inputs made once, outside the batch), so candidates
and baselines are timed alike. Every function this module calls is bound at import (`_perf_counter`,
`_cuda_synchronize`, `_Event`), which happens before candidate code is imported in the child; the child verifies
they are unchanged.

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
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np
import torch

_perf_counter = time.perf_counter
_cuda_synchronize = torch.cuda.synchronize
_Event = torch.cuda.Event
_elapsed_time = torch.cuda.Event.elapsed_time
_record = torch.cuda.Event.record

METHOD_VERSION = 8
"""Bumped whenever the way calls are timed changes: cached baselines from another method are re-measured.
3: every call stands alone between device-wide synchronisations (was: a batch of events).
4: batches of calls queued back to back, each behind its own flush; a batch's mean is its claim.
5: a lead of queued flushes before each batch's first call.
6: the clock makes its device current (baselines of cuda:N, N > 0, had been timed on cuda:0's stream).
7: the lead before every call of a batch, not only the first (a call's inputs are made in the batch, after its lead).
8: the lead also covers the host's queueing of the calls themselves (`LEAD_CALL_HOST_MS`)."""
L2_FLUSH_BYTES = 256 << 20
"""Larger than any current L2 (50 MB on H100, 60 MB on H200): zeroing it evicts the inputs."""
CPU_FLUSH_BYTES = 16 << 20
"""About a last-level cache's worth on the CI machines; the CPU profile exists to test the pipeline, and a
bigger flush would dwarf the CPU-sized calls it separates."""

LEAD_MS = 0.5
"""Device time queued ahead of a batch's making of its inputs (whole flushes, at least one): ~5 flushes of ~0.09 ms on
an H100, while the host needs ~5 us to queue each. `JUDGE_TIMING_LEAD_MS` overrides it (0: none), for measuring what
it changes. Where making the batch's inputs takes the host longer to queue than this, the lead is longer
(`LEAD_MAKE_FACTOR`)."""

LEAD_MAKE_FACTOR = 1.5
"""A batch's lead is at least this many times the host's time to queue the making of all its calls' inputs (measured
for one call before the candidate exists: `DeviceClock.learn_making`): the host then has all of it queued before the
device reaches its end, so the device's span from the lead to the first call is device work alone. Measured on an H100
(2026-11-28, docs/results/inputs-h100-2026-11-28.md): planted cross_entropy inputs take the host 0.51 ms to queue and
the device 0.32 ms to make; kl_div's 1.45 and 4.82 ms. 1.5 leaves a third for a host slower than at calibration."""

FLUSH_CALIBRATION_RUN = 20
"""Flushes timed back to back at calibration, the way the lead queues them: a flush between two events of its own read
0.085 ms on an H100, one of a queued run 0.075 ms (2026-11-28); the parent counts the lead's flushes at this figure."""

LEAD_CALL_HOST_MS = 0.5
"""What the lead allows the host per call beyond queueing its inputs' making: queueing the call itself (the candidate's
launches, its events, a flush). Without it the host fell behind short calls inside their own events: honest
cross_entropy_fast (8 calls of 0.14 ms a batch) ranked +1.2-3.7% over the judge before issue 39 on an H200, and with
a 12 ms lead +0% (2026-11-28, four repeats each)."""

MAX_LEAD_MS = 12.0
"""The longest lead: a host that needs longer to queue a batch's inputs is not a judging host."""


def lead_flushes(lead_ms: float, make_host_ms: float, calls: int, flush_ms: float) -> int:
    """The flushes ahead of a batch of `calls` calls: `lead_ms` of them, or LEAD_MAKE_FACTOR times the host's time to
    queue the making of all their inputs and the calls (LEAD_CALL_HOST_MS each), capped at MAX_LEAD_MS; 0 where the
    lead is off. The child queues them, the parent counts them as the judge's own device work (both compute this from
    the calibration)."""
    if lead_ms <= 0 or flush_ms <= 0:
        return 0
    lead = min(max(lead_ms, LEAD_MAKE_FACTOR * calls * (make_host_ms + LEAD_CALL_HOST_MS)), MAX_LEAD_MS)
    return math.ceil(lead / flush_ms)


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


def _no_inputs() -> list[torch.Tensor]:
    return []


@dataclass(frozen=True)
class Call:
    """One timed call of a batch: `make` makes its inputs (the judge's work, inside the batch, just before the call),
    `run` calls the candidate on them. Both are plain closures the harness made before the batch."""

    make: Callable[[], list[torch.Tensor]]
    run: Callable[[list[torch.Tensor]], object]


def as_call(fn: Callable[[], object] | Call) -> Call:
    """A plain callable is a call whose inputs exist already (the baselines', the tests')."""
    return fn if isinstance(fn, Call) else Call(_no_inputs, lambda inputs, fn=fn: fn())


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
    lead_ms: float
    make_host_ms: float

    def lead(self, calls: int) -> int:
        return lead_flushes(self.lead_ms, self.make_host_ms, calls, self.flush_ms)


class DeviceClock:
    """Flush, synchronise and timestamp on one device."""

    def __init__(self, device: torch.device, lead_ms: float | None = None, *, traced: bool = False) -> None:
        """`lead_ms`: the least lead before a GPU batch (default `JUDGE_TIMING_LEAD_MS`, else `TRACED_LEAD_MS` where the
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
        self.make_host_ms = 0.0
        """The host's time to queue the making of one call's inputs (`learn_making`): sizes each batch's lead."""
        self.flush_span = (self._flush.data_ptr(), self._flush.numel())

    def state(self) -> ClockState:
        return ClockState(device=self.device, is_cuda=self.is_cuda, flush=self.flush,
                          flush_span=(self._flush.data_ptr(), self._flush.numel()),
                          host_overhead_ms=self.host_overhead_ms, flush_ms=self.flush_ms, lead_ms=self.lead_ms,
                          make_host_ms=self.make_host_ms)

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
            runs = []
            for _ in range(5):
                start, end = _Event(enable_timing=True), _Event(enable_timing=True)
                _record(start)
                for _ in range(FLUSH_CALIBRATION_RUN):
                    self.flush()
                _record(end)
                self.synchronize()
                runs.append(_elapsed_time(start, end) / FLUSH_CALIBRATION_RUN)
            self.flush_ms = statistics.median(runs)
        return self.host_overhead_ms

    def learn_making(self, make_host_ms: float) -> None:
        """What queueing the making of one call's inputs takes the host (measured before the candidate exists)."""
        self.make_host_ms = make_host_ms

    @property
    def lead_flushes(self) -> int:
        """The lead before a batch of one call (what the tests and the baselines see)."""
        return self.state().lead(1)


@dataclass(frozen=True, kw_only=True)
class BatchTime:
    """One batch of timed calls. `times_ms` are what the judge reports, the rest explains them."""

    times_ms: list[float]
    host_ms: float
    """The host clock around the whole batch, less what the judge's own work in it took (GPU: the leads, the making
    of the inputs and the flushes, as the device measured them; CPU: the making of the inputs and the flushes, as
    the host did) and the calibrated clock overhead."""
    events_ms: list[float] | None
    """CUDA events around each call on the current stream; None on the CPU."""
    hidden_work: bool
    results: list[object]
    inputs: list[list[torch.Tensor]] = field(default_factory=list)
    """Each call's inputs, made in the batch (the harness fingerprints them after the batch)."""
    made_ms: float = 0.0
    """The judge's span before the first call: GPU, the device from the lead's first event to the first call's start
    event (the lead's flushes, the making of every call's inputs, the first call's flush); CPU, the host clock around
    the making of the inputs."""
    gaps_ms: list[float] = field(default_factory=list)
    """GPU: the device from each call's end event to the next call's start event (its flush, and any wait for the
    host)."""
    peak: int | None = None
    """GPU, when asked for: the most device memory allocated during the calls beyond what existed before the first
    (every call's inputs included): a forward batch keeps only the calls' outputs alive, so it is a call's peak."""
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

    def take(self, index: int, result: object, inputs: list[torch.Tensor]) -> None:
        """Copy call `index`'s result: on the CPU inside that call's timed interval, on a GPU after the batch's
        last end event and before the device-wide synchronisation that ends the host clock."""

    def close(self) -> tuple[object, ...]:
        """Once, after the last `take` and still inside the window: what was kept, fixed."""


class Marks(Protocol):
    """What the child's kernel trace recorder marks in a GPU batch (sandbox/child/recorder.py): a canary before and
    after each call, outside its timing events. Nothing else: every mark is host work between the calls, and the
    device's windows come from the canaries alone."""

    def canary(self) -> None: ...


class Memory(Protocol):
    """The device allocator's counters a GPU batch reads before its first call and after its last (the child's:
    torch.cuda's, bound before the candidate exists): host-side bookkeeping, no device work, outside every call's
    events. Not around each call: torch's `memory_allocated` builds its whole statistics dict each time (~0.1-0.3 ms of
    host time), which on an H100 put the host behind short calls (cross_entropy's 0.19 ms, 2026-11-28)."""

    def begin(self) -> None: ...

    def peak(self) -> int: ...


def time_cpu_batch(clock: DeviceClock, calls: list[Callable[[], object] | Call], *,
                   keep: Keeper | None = None) -> BatchTime:
    """The batch's inputs made, then per call the cache evicted and the host clock around the call alone. `keep`
    takes each call's result inside its timed interval. (One call a batch in the judge: a flush cannot overlap a call
    on the CPU, so batching buys nothing there.)"""
    state, calls, perf = clock.state(), tuple(as_call(c) for c in calls), _perf_counter
    times, results = [], []
    m0 = perf()
    sets = [call.make() for call in calls]
    made = (perf() - m0) * 1e3
    for i, (call, inputs) in enumerate(zip(calls, sets)):
        state.flush()
        t0 = perf()
        result = call.run(inputs)
        if keep is not None:
            keep.take(i, result, inputs)
        times.append((perf() - t0) * 1e3)
        results.append(result)
    kept = keep.close() if keep is not None else ()
    return BatchTime(times_ms=times, host_ms=sum(times), events_ms=None, hidden_work=False, results=results,
                     inputs=sets, made_ms=made, kept=kept, tampered=clock.changes(state))


def time_cuda_batch(clock: DeviceClock, calls: list[Callable[[], object] | Call], keep: Keeper | None = None,
                    marks: Marks | None = None, memory: Memory | None = None) -> BatchTime:
    """The batch's lead, every call's inputs made, then per call a flush and events around the call; checked against
    the host clock (module doc). `keep` takes every result after the last end event, inside the host clock's window.
    `marks` (the kernel trace): a canary before each call's start event and after its end event (queued outside the
    events: device time no call is charged). `memory`: the allocator's peak around each call, outside its events."""
    state, calls = clock.state(), tuple(as_call(c) for c in calls)
    perf, sync, record, elapsed = _perf_counter, _cuda_synchronize, _record, _elapsed_time
    lead = _Event(enable_timing=True)
    events = tuple((_Event(enable_timing=True), _Event(enable_timing=True)) for _ in calls)
    results = []
    flushes = state.lead(len(calls))
    sync(state.device)
    t0 = perf()
    record(lead)
    for _ in range(flushes):
        state.flush()
    sets = tuple(call.make() for call in calls)
    if memory is not None:  # once, outside every call: reading torch's counters costs the host ~0.1-0.3 ms
        memory.begin()
    for call, inputs, (start, end) in zip(calls, sets, events):
        state.flush()
        if marks is not None:
            marks.canary()
        record(start)
        results.append(call.run(inputs))
        record(end)
        if marks is not None:
            marks.canary()
    peak = memory.peak() if memory is not None else None
    kept = ()
    if keep is not None:
        for i, (result, inputs) in enumerate(zip(results, sets)):
            keep.take(i, result, inputs)
        kept = keep.close()
    sync(state.device)
    wall_ms = (perf() - t0) * 1e3
    made = elapsed(lead, events[0][0])
    events_ms = [elapsed(start, end) for start, end in events]
    gaps = [elapsed(events[i - 1][1], events[i][0]) for i in range(1, len(events))]
    host_ms = max(wall_ms - state.host_overhead_ms - made - (len(calls) - 1) * state.flush_ms, 0.0)
    hidden = host_ms > HIDDEN_WORK_RATIO * sum(events_ms) + HIDDEN_WORK_SLACK_MS
    times = [host_ms / len(calls)] * len(calls) if hidden else events_ms
    tampered = clock.changes(state)
    if min([made, *events_ms, *gaps]) < -EVENT_RESOLUTION_MS:
        tampered += ("the batch's timing events (recorded again, out of order, during the batch)",)
    return BatchTime(times_ms=times, host_ms=host_ms, events_ms=events_ms, hidden_work=hidden, results=results,
                     inputs=list(sets), made_ms=made, gaps_ms=gaps, peak=peak, kept=kept, tampered=tampered)


def time_batch(clock: DeviceClock, calls: list[Callable[[], object] | Call], *, keep: Keeper | None = None,
               marks: Marks | None = None, memory: Memory | None = None) -> BatchTime:
    """The strategy for the clock's device. `marks` and `memory`: a GPU's alone (the CPU has no device activity to
    mark, and a mark's host time between calls is not overlapped there: it would lengthen the parent's window around
    each call, not the call)."""
    if clock.is_cuda:
        return time_cuda_batch(clock, calls, keep, marks, memory)
    return time_cpu_batch(clock, calls, keep=keep)


def time_one_call(clock: DeviceClock, fn: Callable[[], object]) -> CallTime:
    """A batch of one call."""
    timed = time_batch(clock, [fn])
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
