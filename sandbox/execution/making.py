"""The parent's own making of a timed call's inputs, and what it took the device: the judge's work inside a batch.

Trusted; runs in the parent. A timed call's inputs are made in the child inside the timed batch, just before the
call (sandbox/child/timing.py), so that no code of the candidate's can work on them before the batch. The
device's span from the call's lead to its start event is therefore the judge's work (the lead's flushes, the
making, one flush) plus whatever else ran there. The flushes are calibrated before the candidate exists; the
making is measured here, on the parent's own device, for the same seed: the same kernels on the same sizes, so the
same device time (on an H100, 2026-11-28: kl_div's planted inputs 4.82 ms, spread 0.35% over six; cross_entropy's
0.32 ms; docs/results/inputs-h100-2026-11-28.md). What the child's span holds beyond that is work the judge did not
ask for, and the parent charges it to the call (sandbox/execution/plausibility.py, `unattributed_work`).

The parent measures device time alone: a sleep kernel queued ahead of the making gives the host time to queue all
of it before the device starts, so no launch latency of the host's is in the figure (making cross_entropy's inputs
takes the host longer to queue than the device to run).

On the CPU the figure is the parent thread's own CPU time for the making, taken at the moment the child makes the same
inputs: the CPU-time bound (sandbox/execution/plausibility.py, `call_floor_ms`) takes it out of the sandbox's CPU time
for the round trip. A loaded host's caches slow the making in both processes alike, so what is left is the call's
work and whatever else ran there (an empty batch's making, timed before the candidate existed on a host loaded
otherwise, is not the same figure). The parent makes them on one torch thread, as the child does
(`_made_on_one_thread`).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

import torch

SLEEP_CALIBRATION_CYCLES = 2_000_000
"""The sleep kernel's length when its clock is measured (~1 ms on an H100's ~1.98 GHz SM clock)."""
MIN_HEAD_START_MS = 1.0
HEAD_START_FACTOR = 2.0
"""The sleep ahead of the making: twice what the host last took to queue it, at least 1 ms."""
MAX_HEAD_START_MS = 20.0

_cycles_per_ms: dict[int, float] = {}
_last_queue_ms: dict[int, float] = {}
_lock = threading.Lock()


def _sleep_rate(index: int) -> float:
    """Cycles of `torch.cuda._sleep` per millisecond on this device, measured once."""
    with _lock:
        if index not in _cycles_per_ms:
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            stream = torch.cuda.current_stream(index)
            torch.cuda._sleep(SLEEP_CALIBRATION_CYCLES // 4)  # the kernel loaded and the clocks up
            start.record(stream)
            torch.cuda._sleep(SLEEP_CALIBRATION_CYCLES)
            end.record(stream)
            end.synchronize()
            _cycles_per_ms[index] = SLEEP_CALIBRATION_CYCLES / max(start.elapsed_time(end), 1e-3)
        return _cycles_per_ms[index]


_one_thread = threading.Lock()
"""Held while torch's thread count is lowered: the setting is the process's, and a worker judges several candidates
on its threads at once (two saving and restoring it unguarded could leave it at one for good)."""


def _made_on_one_thread(make: Callable[[], list[torch.Tensor]]) -> tuple[list[torch.Tensor], float]:
    """(inputs, this thread's CPU ms for `make()`), made on one torch thread, as the child makes them: torch's other
    threads would make this thread spin at their barrier when the host's cores are taken (5-8 ms of its CPU time for
    kl_div's 0.3 ms making, on the 2-core development machine under load), a figure of the host's, not the making's."""
    with _one_thread:
        threads = torch.get_num_threads()
        torch.set_num_threads(1)
        try:
            started = time.thread_time_ns()
            inputs = make()
            return inputs, (time.thread_time_ns() - started) / 1e6
        finally:
            torch.set_num_threads(threads)


def made_on_device(make: Callable[[], list[torch.Tensor]],
                   device: torch.device) -> tuple[list[torch.Tensor], float]:
    """(inputs, ms the making took): on a GPU the device's time, by events on its current stream behind a sleep long
    enough for the host to queue all of it first; on the CPU this thread's CPU time."""
    if device.type != "cuda":
        return _made_on_one_thread(make)
    index = device.index if device.index is not None else torch.cuda.current_device()
    with torch.cuda.device(index):
        rate = _sleep_rate(index)
        stream = torch.cuda.current_stream(index)
        head_start = min(max(MIN_HEAD_START_MS, HEAD_START_FACTOR * _last_queue_ms.get(index, 0.0)),
                         MAX_HEAD_START_MS)
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        torch.cuda._sleep(int(head_start * rate))
        queued = time.perf_counter()
        start.record(stream)
        inputs = make()
        end.record(stream)
        _last_queue_ms[index] = (time.perf_counter() - queued) * 1e3
        end.synchronize()
        return inputs, start.elapsed_time(end)
