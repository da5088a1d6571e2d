"""The GPU's CPU-time floor (sandbox/execution/plausibility.py, `gpu_own_work_ms`) on what an H200 recorded.

tests/fixtures/timing/h200-2026-11-28.json holds the bound's inputs from verdicts of 2026-11-28 on one H200:
- `loaded_honest`: honest corpus kernels refused `tamper_detected` ("the kernel accounted at least ... ms of CPU work
  per call") while 16 builds shared the host's 16 cores (scripts/gpu/builders_burst.py, the single worker and eight
  builders). Their empty batches, measured at a spare's calibration, had waited for a CPU for up to half their window;
  their timed batches had not.
- `idle`: the honest CUDA corpus and the registry attacks, judged one at a time on the idle host.

A differential over recorded data: the same verdicts under the floor before (the empty batches' CPU time alone) and
after (scaled by the timed batches' own share of the wall on a CPU).
"""

from __future__ import annotations

import json
import statistics
from pathlib import Path

import pytest

from sandbox.execution.plausibility import Breach, call_floor_ms, gpu_own_work_ms, timing_bound

RECORDED = json.loads((Path(__file__).parents[1] / "fixtures" / "timing" / "h200-2026-11-28.json").read_text())


def _bound(row: dict, training: bool = False) -> Breach | None:
    return timing_bound(row["claims_ms"], row["windows_ms"], row["runs_ms"], [row["empty_call_run_ms"]], "cuda",
                        training=training, empty_windows_ms=[row["empty_call_window_ms"]])


def _floors(row: dict) -> tuple[float, float]:
    before = call_floor_ms(row["runs_ms"], [row["empty_call_run_ms"]])
    after = call_floor_ms(row["runs_ms"], [row["empty_call_run_ms"]], "cuda", row["windows_ms"],
                          [row["empty_call_window_ms"]])
    return before, after


@pytest.mark.parametrize("row", RECORDED["loaded_honest"], ids=lambda r: f"{r['arrangement']}-{r['task']}")
def test_honest_kernels_refused_on_a_loaded_host_pass(row: dict) -> None:
    before, _ = _floors(row)
    assert before == pytest.approx(row["call_floor_ms"], abs=1e-4)  # the recorded floor (inputs rounded to 10 ns)
    assert timing_bound(row["claims_ms"], row["windows_ms"], row["runs_ms"], [row["empty_call_run_ms"]],
                        "cuda") is not None  # ... and it refused them
    assert _bound(row) is None


@pytest.mark.parametrize("row", RECORDED["idle"], ids=lambda r: r["file"])
def test_on_an_idle_host_the_floor_is_what_it_was(row: dict) -> None:
    """Within 0.06 ms everywhere (kl_div_naive's empty batch ran 98% of its window), and the verdicts stand: every
    honest kernel passes, and every attack the floor refused is still refused by it."""
    before, after = _floors(row)
    assert after <= before
    assert before - after < 0.06
    breach = _bound(row, training=row["training"])
    refused_by_floor = row["status"] == "tamper_detected" and statistics.median(row["claims_ms"]) < 0.65 * before
    assert (breach is not None) == refused_by_floor


def test_the_timed_share_counts_at_most_the_whole_window() -> None:
    """A candidate that runs threads beside its calls raises its CPU time past the wall: the judge's share still
    counts at most the empty batches' wall window, so the most it can take off the floor is the calibration's own
    wait for a CPU."""
    empty_runs, empty_windows = [3.0], [6.0]
    assert gpu_own_work_ms([16.0], [8.0], empty_runs, empty_windows) == 6.0
    assert gpu_own_work_ms([4.0], [8.0], empty_runs, empty_windows) == 3.0  # half the wall: half of 6
    assert gpu_own_work_ms([1.0], [8.0], empty_runs, empty_windows) == 3.0  # never under the empty batches' own CPU


def test_the_cpu_floor_ignores_windows() -> None:
    """On the CPU the making's own CPU time is measured beside each batch; its windows carry a saturated host's wait
    for a CPU, and nothing of them enters the floor."""
    runs, windows, empty = [2.0] * 5, [12.0] * 5, [0.4] * 3
    assert timing_bound([0.3] * 5, windows, runs, empty, "cpu", empty_windows_ms=[11.0] * 3) is not None
    # on a GPU these figures weigh the windows: the timed batches ran on a CPU a sixth of their wall, so the judge's
    # share is 11 / 6 ms and the floor 2 - 11 / 6 - RUN_NOISE_MS (0.07 ms), which the 0.3 ms claim clears
    assert timing_bound([0.3] * 5, windows, runs, empty, "cuda", empty_windows_ms=[11.0] * 3) is None
