"""A worker's cumulative statistics, kept in memory and written to its `workers` row by the heartbeat.

Workers are separate processes, possibly on other hosts, so they cannot share a Prometheus registry.
Each keeps monotonically growing counters here; /metrics (service.observability.metrics) sums them
over every row at scrape time. The shape is plain JSON so the row is readable in SQL.
"""

from __future__ import annotations

import bisect
import threading
from typing import Any

BUCKETS_S = (0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1800.0)
"""Upper bounds of the stage-duration histograms: a cached CPU build takes ~0.1 s, a fresh CUDA build ~60 s,
a compile timeout is 300 s; the +Inf bucket is implied (the count)."""

STAGES = ("compile", "device_wait", "execute", "record", "profile")
"""compile: sandbox.prepare; device_wait: compiled until a device took it; execute: sandbox.execute;
record: writing the result (finish), retries while the database is away included; profile: the device time of
a profile asked for with the submission (service/profiles), taken after the verdict and never counted as
judging (`device_busy`)."""


class WorkerStats:
    """Thread-safe counters of one worker process."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._hist: dict[str, dict[str, Any]] = {}
        self._busy: dict[str, float] = {}
        self._outcomes: dict[str, int] = {}
        self._artifacts: dict[str, int] = {}

    def observe(self, stage: str, seconds: float) -> None:
        with self._lock:
            h = self._hist.setdefault(stage, {"buckets": [0] * len(BUCKETS_S), "count": 0, "sum": 0.0})
            # Non-cumulative here (one bucket per observation); metrics.py accumulates at scrape.
            i = bisect.bisect_left(BUCKETS_S, seconds)
            if i < len(BUCKETS_S):
                h["buckets"][i] += 1
            h["count"] += 1
            h["sum"] += seconds

    def device_busy(self, device: str, seconds: float) -> None:
        with self._lock:
            self._busy[device] = self._busy.get(device, 0.0) + seconds

    def outcome(self, outcome: str) -> None:
        with self._lock:
            self._outcomes[outcome] = self._outcomes.get(outcome, 0) + 1

    def artifact(self, event: str) -> None:
        """A build artifact published, installed, found local, or refused (service/worker/handoff.py)."""
        with self._lock:
            self._artifacts[event] = self._artifacts.get(event, 0) + 1

    def snapshot(self) -> dict[str, Any]:
        with self._lock:
            return {"stages": {k: {**v, "buckets": list(v["buckets"])} for k, v in self._hist.items()},
                    "device_busy_s": dict(self._busy), "outcomes": dict(self._outcomes),
                    "artifacts": dict(self._artifacts)}
