"""The limits of sandbox/execution/plausibility.py at their boundaries, on numbers: speed-of-light (100% plus the
bandwidth
probe's margin on a GPU), the parent's own wall window on a GPU, and the speed-of-light figure a verdict reports;
and the bandwidth probe's record of its own spread (sandbox/execution/measure_baselines.py)."""

from __future__ import annotations

import pytest
import torch

from reference import get_task
from sandbox.execution import measure_baselines
from sandbox.execution.timed_phase import _performance
from sandbox.execution.plausibility import (
    IMPLAUSIBLE_SOL_FRACTION,
    MIN_WINDOW_FRACTION,
    SOL_PROBE_MARGIN,
    speed_of_light,
    speed_of_light_fraction,
    untimed_work_bound,
)
from sandbox.execution.timing import summarize
from sandbox.verdict import TimingStats

MIN_BYTES = 2_000_000_000
BANDWIDTH = 1e12
FLOOR_MS = MIN_BYTES / BANDWIDTH * 1e3  # 2 ms


def median_at(fraction: float) -> float:
    """The median that is `fraction` of speed-of-light."""
    return FLOOR_MS / fraction


# --- speed-of-light ------------------------------------------------------------------------------------

def test_the_gpu_limit_is_speed_of_light_plus_the_probe_margin() -> None:
    assert IMPLAUSIBLE_SOL_FRACTION["cuda"] == pytest.approx(1.0 + SOL_PROBE_MARGIN)
    # 2.6x the probe's whole run-to-run range over 31 H100 readings (0.39%), and still under the 102-104% at
    # which hostile kernels were ranked.
    assert 0.0039 * 2 < SOL_PROBE_MARGIN < 0.02


@pytest.mark.parametrize(("fraction", "caught"), [
    (0.989, False),   # the best honest kernel measured (kl_div_fast_split, H100)
    (0.993, False),   # the same against a bandwidth probe read 0.4% low (the probe's whole run-to-run range)
    (1.0, False),
    (1.0 + SOL_PROBE_MARGIN, False),  # the limit itself passes
    ((1.0 + SOL_PROBE_MARGIN) * 1.0001, True),
    (1.02, True), (1.04, True),  # where a hidden attack corpus was ranked against the old 1.15
])
def test_gpu_speed_of_light_at_its_boundary(fraction: float, caught: bool) -> None:
    breach = speed_of_light(median_at(fraction), MIN_BYTES, BANDWIDTH, "cuda")
    assert (breach is not None) is caught
    if breach:
        assert breach.rule == "implausible_speed" and breach.details["limit"] == IMPLAUSIBLE_SOL_FRACTION["cuda"]
        assert breach.details["speed_of_light_fraction"] == pytest.approx(fraction)
        assert f"{100 * fraction:.1f}%" in breach.diagnosis


@pytest.mark.parametrize(("fraction", "caught"), [(0.2, False), (1.02, False), (1.5, False), (1.5001, True)])
def test_cpu_speed_of_light_keeps_its_wide_limit(fraction: float, caught: bool) -> None:
    """The CPU's inputs may come from a cache the DRAM probe never sees (plausibility.IMPLAUSIBLE_SOL_FRACTION)."""
    assert (speed_of_light(median_at(fraction), MIN_BYTES, BANDWIDTH, "cpu") is not None) is caught


def test_no_bandwidth_no_rule() -> None:
    assert speed_of_light(0.001, MIN_BYTES, None, "cuda") is None
    assert speed_of_light_fraction(0.001, MIN_BYTES, None) is None


@pytest.mark.parametrize("task_id", ["kl_div", "cross_entropy"])
def test_the_reported_fraction_is_the_checked_one(task_id: str) -> None:
    """`Performance.speed_of_light_fraction` and the rule compute one figure: a verdict never shows a fraction
    other than the one the rule passed."""
    task = get_task(task_id)
    shape = task.official_shape
    bandwidth = 3.0042e12
    limit_ms = task.min_bytes(shape) / bandwidth * 1e3 / IMPLAUSIBLE_SOL_FRACTION["cuda"]
    for median in (limit_ms * 0.999, limit_ms, limit_ms * 1.3):
        stats = TimingStats(**{**summarize([median] * 5), "reps": 5})
        perf = _performance(task, shape, stats, {"bandwidth_bytes_per_s": bandwidth}, None)
        assert perf.speed_of_light_fraction == speed_of_light_fraction(median, perf.min_bytes, bandwidth)
        breach = speed_of_light(median, perf.min_bytes, bandwidth, "cuda")
        assert (breach is not None) is (perf.speed_of_light_fraction > IMPLAUSIBLE_SOL_FRACTION["cuda"])
        if breach:
            assert breach.details["speed_of_light_fraction"] == perf.speed_of_light_fraction


# --- the parent's wall window (GPU) -------------------------------------------------------------------

HONEST_H100 = [
    # (median claim, median window, empty batch's window), per call, honest correct verdicts on an H100:
    # docs/results/verdicts-h100-2026-11-26.json, the lowest and highest ratios of each task ...
    (0.7335, 1.4480, 0.3882),   # kl_div_fused, 0.69 (the lowest of that run)
    (0.7265, 1.4038, 0.4105),   # kl_div_fast, 0.73
    (0.1953, 0.4806, 0.2204),   # cross_entropy_online, 0.75
    (0.6437, 1.0821, 0.2284),   # cross_entropy_train_function (a training step), 0.75
    (2.0095, 2.3092, 0.2197),   # cross_entropy_naive, 0.96
    (14.9788, 15.7268, 0.3852),  # c3_batch_lookahead's honest Triton kernel, 0.98
    # ... and the lowest of the nine H100 runs of 2026-11-23 to 26 (cross_entropy_fast, 2026-11-25c: 0.54)
    (0.1937, 0.5936, 0.2342),
]


@pytest.mark.parametrize(("claim", "window", "empty"), HONEST_H100)
def test_the_window_rule_passes_honest_h100_kernels_and_catches_them_understated(claim, window, empty) -> None:
    windows = [window] * 6
    assert untimed_work_bound([claim] * 6, windows, empty, "cuda") is None
    breach = untimed_work_bound([claim / 2.5] * 6, windows, empty, "cuda")
    assert breach is not None and breach.rule == "timing" and "wall clock" in breach.diagnosis


def test_the_window_rule_at_its_boundary() -> None:
    window, empty = 1.4, 0.4
    limit = MIN_WINDOW_FRACTION * (window - empty)
    assert untimed_work_bound([limit] * 5, [window] * 5, empty, "cuda") is None
    breach = untimed_work_bound([limit * 0.999] * 5, [window] * 5, empty, "cuda")
    assert breach is not None and breach.details["window_beyond_empty_ms"] == pytest.approx(window - empty)
    # medians, not means: one stalled round trip (a host hiccup) moves nothing
    assert untimed_work_bound([limit] * 5, [window] * 4 + [window * 50], empty, "cuda") is None


def test_the_window_rule_is_gpu_only_and_vacuous_when_the_empty_batch_took_longer() -> None:
    assert untimed_work_bound([0.01] * 5, [10.0] * 5, 0.2, "cpu") is None  # a saturated host's waiting, on a CPU
    assert untimed_work_bound([0.01] * 5, [0.3] * 5, 0.5, "cuda") is None  # window under the empty one's
    assert untimed_work_bound([], [], 0.2, "cuda") is None


# --- the bandwidth probe -------------------------------------------------------------------------------

def test_the_bandwidth_probe_records_its_spread(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(measure_baselines.BANDWIDTH_BYTES, "cpu", 16 << 20)
    result = measure_baselines.bandwidth_probe(torch.device("cpu"), reps=10)
    probe = result["bandwidth_probe"]
    assert probe["chosen"] in ("copy", "read") and probe["reps"] == 10 and probe["buffer_bytes"] == 16 << 20
    assert result["bandwidth_bytes_per_s"] == probe[probe["chosen"]]["bytes_per_s"]
    assert result["bandwidth_bytes_per_s"] == max(probe["copy"]["bytes_per_s"], probe["read"]["bytes_per_s"])
    for name in ("copy", "read"):
        p = probe[name]
        assert 0 < p["min_bytes_per_s"] <= p["q25_bytes_per_s"] <= p["q75_bytes_per_s"] <= p["max_bytes_per_s"]
