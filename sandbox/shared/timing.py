"""The timing scheme's figures that both sides compute alike: the child (sandbox/child/timing.py) queues a batch's lead
of flushes, and the parent (sandbox/execution/phases.py) counts the same flushes as the judge's own device work; the
parent keys cached baselines by `METHOD_VERSION`, the version of the child's way of timing.
"""

from __future__ import annotations

import math

METHOD_VERSION = 8
"""Bumped whenever the way calls are timed changes: cached baselines from another method are re-measured.
3: every call stands alone between device-wide synchronisations (was: a batch of events).
4: batches of calls queued back to back, each behind its own flush; a batch's mean is its claim.
5: a lead of queued flushes before each batch's first call.
6: the clock makes its device current (baselines of cuda:N, N > 0, had been timed on cuda:0's stream).
7: the lead before every call of a batch, not only the first (a call's inputs are made in the batch, after its lead).
8: the lead also covers the host's queueing of the calls themselves (`LEAD_CALL_HOST_MS`)."""
LEAD_MAKE_FACTOR = 1.5
"""A batch's lead is at least this many times the host's time to queue the making of all its calls' inputs (measured
for one call before the candidate exists: `DeviceClock.learn_making`): the host then has all of it queued before the
device reaches its end, so the device's span from the lead to the first call is device work alone. Measured on an H100
(2026-11-28, docs/results/inputs-h100-2026-11-28.md): planted cross_entropy inputs take the host 0.51 ms to queue and
the device 0.32 ms to make; kl_div's 1.45 and 4.82 ms. 1.5 leaves a third for a host slower than at calibration."""

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
