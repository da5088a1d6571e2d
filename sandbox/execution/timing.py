"""The parent's side of timing: how many calls a timed batch holds (`batch_size`), how many calls to time
(`plan_reps`), and what the times say (`summarize`). The calls themselves are timed in the child
(sandbox/child/timing.py).
"""

from __future__ import annotations

import numpy as np
import torch


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
