"""Measuring one call on one device, in the manner of triton.testing.do_bench, one call at a time.

Each timed call stands alone, so that its inputs can come from a seed drawn for it alone (see
sandbox/execute.py): the device is idle when the call starts, and a device-wide synchronisation ends it.

- CPU (`time_cpu_call`): flush the cache, then the host clock around the call.
- GPU (`time_cuda_call`): queue an L2 flush (zero a buffer larger than the L2, so no call runs on warm
  data), record a start event, call, record an end event, synchronise the whole device. The flush keeps
  the device busy while the host launches the call, so launch latency is not timed (as in do_bench).
  Events on the current stream are precise but blind to work on another stream or thread; the host clock
  across the call, ended by a device-wide synchronisation, sees all of it. When the host saw clearly more
  than the events (`HIDDEN_WORK_RATIO`), the call's time is the host's (`hidden_work`).

`time_calls` repeats one of these for the trusted baselines, so candidates and baselines are timed alike.
Every function this module calls is bound at import (`_perf_counter`, `_cuda_synchronize`, `_Event`),
which happens before candidate code is imported in the child; the child verifies they are unchanged.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch

_perf_counter = time.perf_counter
_cuda_synchronize = torch.cuda.synchronize
_Event = torch.cuda.Event
_elapsed_time = torch.cuda.Event.elapsed_time
_record = torch.cuda.Event.record

METHOD_VERSION = 3
"""Bumped whenever the way calls are timed changes: cached baselines from another method are re-measured.
3: every call stands alone between device-wide synchronisations (was: a batch of events)."""
L2_FLUSH_BYTES = 256 << 20
"""Larger than any current L2 (50 MB on H100, 60 MB on H200): zeroing it evicts the inputs."""
CPU_FLUSH_BYTES = 16 << 20
"""About a last-level cache's worth on the CI machines; the CPU profile exists to test the pipeline, and a
bigger flush would dwarf the CPU-sized calls it separates."""

HIDDEN_WORK_RATIO = 1.25
"""A call whose host time exceeds 125% of its events (plus `HIDDEN_WORK_SLACK_MS`) did work the events
did not see: another stream, another thread, or host-side work between kernels."""
HIDDEN_WORK_SLACK_MS = 0.05
"""Host-side noise one synchronised call may show beyond its events (wake-up after the synchronisation)."""


@dataclass(frozen=True)
class CallTime:
    """One timed call. `time_ms` is what the judge reports, the rest explains it."""

    time_ms: float
    host_ms: float
    """The host clock around the call (flush and calibrated clock overhead removed)."""
    event_ms: float | None
    """CUDA events around the call on the current stream; None on the CPU."""
    hidden_work: bool
    result: object


@dataclass(frozen=True)
class CallTimes:
    """Repeated calls of one callable (the trusted baselines)."""

    times_ms: list[float]
    hidden_work: bool


class DeviceClock:
    """Flush, synchronise and timestamp on one device."""

    def __init__(self, device: torch.device) -> None:
        self.device = device
        self.is_cuda = device.type == "cuda"
        size = L2_FLUSH_BYTES if self.is_cuda else CPU_FLUSH_BYTES
        self._flush = torch.empty(size // 4, dtype=torch.int32, device=device)
        self.host_overhead_ms = 0.0
        self.flush_ms = 0.0

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
        return self.host_overhead_ms


def time_cpu_call(clock: DeviceClock, fn: Callable[[], object], *, flush: bool = True) -> CallTime:
    """The host clock around one call, after evicting the cache (`flush=False`: the caller just did)."""
    if flush:
        clock.flush()
    t0 = _perf_counter()
    result = fn()
    ms = (_perf_counter() - t0) * 1e3
    return CallTime(ms, ms, None, False, result)


def time_cuda_call(clock: DeviceClock, fn: Callable[[], object]) -> CallTime:
    """Events around one call behind a queued L2 flush, checked against the host clock (see the module doc)."""
    start, end = _Event(enable_timing=True), _Event(enable_timing=True)
    clock.synchronize()
    t0 = _perf_counter()
    clock.flush()
    _record(start)
    result = fn()
    _record(end)
    clock.synchronize()
    host_ms = max((_perf_counter() - t0) * 1e3 - clock.host_overhead_ms - clock.flush_ms, 0.0)
    event_ms = _elapsed_time(start, end)
    hidden = host_ms > HIDDEN_WORK_RATIO * event_ms + HIDDEN_WORK_SLACK_MS
    return CallTime(max(host_ms, event_ms) if hidden else event_ms, host_ms, event_ms, hidden, result)


def time_one_call(clock: DeviceClock, fn: Callable[[], object], *, cpu_flushed: bool = False) -> CallTime:
    """The strategy for the clock's device. On the CPU the flush cannot overlap anything, so a caller that
    wants it outside a window around the call (the child's `go`) flushes first and says so."""
    return time_cuda_call(clock, fn) if clock.is_cuda else time_cpu_call(clock, fn, flush=not cpu_flushed)


def time_calls(clock: DeviceClock, fn: Callable[[], object], reps: int, warmup: int) -> CallTimes:
    """Warm up, then time `reps` calls of `fn` one at a time (the baselines; sizes the candidate's plan)."""
    for _ in range(warmup):
        fn()
    clock.synchronize()
    calls = [time_one_call(clock, fn) for _ in range(reps)]
    return CallTimes([c.time_ms for c in calls], any(c.hidden_work for c in calls))


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
