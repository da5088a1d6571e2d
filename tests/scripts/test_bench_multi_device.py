"""scripts/bench/bench_multi_device.py's accounts of finished runs: where a run's held seconds went, and the comparison
of runs that issue 13 reads (device stage against the one-GPU run, identical verdicts, per-card medians).

The run.json files are written here in the shape `run` writes them; the runs themselves need the service and a
device (tests/service covers the worker's claims and holds; the GPU runs are in docs/results/)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from scripts.bench import bench_multi_device


def _candidate(file: str, status: str, lane: str | None, median: float | None = None, *, duplicate: bool = False,
               held: float | None = None, spare: float | None = None, stages: dict | None = None) -> dict:
    c = {"line": 1, "file": file, "copy": 0, "expect": "correct", "status": status, "as_expected": status == "correct",
         "median_ms": median, "lane": lane, "claims": 1, "attempts": 1, "diagnosis": "", "duplicate": duplicate}
    if held is not None:
        c |= {"held_s": held, "spare_wait_s": spare, "gate_wait_s": 0.25, "stages": stages or {}}
    return c


def _run(tmp_path: Path, name: str, stage_s: float, lanes: list[str], candidates: list[dict]) -> Path:
    honest = bench_multi_device.honest_medians(candidates)
    run = {"config": f"{len(lanes)} lane(s)", "stage_s": stage_s, "busy_s": {lane: stage_s for lane in lanes},
           "busy_fraction": {lane: 1.0 for lane in lanes}, "claimed_once": True, "overlaps": [],
           "candidates": candidates, "honest": honest}
    folder = tmp_path / name
    folder.mkdir()
    (folder / "run.json").write_text(json.dumps(run))
    return folder


def test_the_held_account_sums_each_judged_job_once_and_names_the_largest_stages() -> None:
    candidates = [
        _candidate("a.py", "correct", "vm/cuda:0", 0.7, held=2.0, spare=1.5, stages={"timing": 0.8, "load": 0.1}),
        _candidate("b.py", "incorrect", "vm/cuda:1", held=1.0, spare=None, stages={"correctness": 0.6}),
        _candidate("a.py", "correct", "vm/cuda:0", 0.7, duplicate=True, held=2.0, spare=1.5),  # shares a's job
    ]
    account = bench_multi_device.held_account(candidates)
    assert account.startswith("2 holds, held 3.0 s, waited for a spare 1.5 s, for a spare's device set-up 0.5 s")
    assert account.endswith("stages: timing 0.8, correctness 0.6, load 0.1")
    older = [{k: v for k, v in c.items() if k not in ("held_s", "spare_wait_s", "gate_wait_s", "stages")}
             for c in candidates]
    assert bench_multi_device.held_account(older) == "not recorded"


def test_compare_names_a_changed_verdict_and_a_device_stage_over_the_limit(tmp_path, capsys) -> None:
    one = _run(tmp_path, "one", 190.0, ["vm/cuda:0"], [
        _candidate("fast.py", "correct", "vm/cuda:0", 0.7250), _candidate("other.py", "correct", "vm/cuda:0", 0.2)])
    two = _run(tmp_path, "two", 108.0, ["vm/cuda:0", "vm/cuda:1"], [
        _candidate("fast.py", "tamper_detected", "vm/cuda:1"), _candidate("other.py", "correct", "vm/cuda:1", 0.21)])
    args = argparse.Namespace(runs=[one, two], stage_limit=0.55, median_limit=0.02)
    assert bench_multi_device.compare(args) == 1
    out = capsys.readouterr().out
    assert "verdict statuses identical in every run: False\n  fast.py copy 0: correct / tamper_detected" in out
    assert "two: device stage 57% of one's (OVER the 55% asked)" in out
    assert "other.py: one vm/cuda:0 0.2000; two vm/cuda:1 0.2100; all runs, per device: 5.0% (OVER 2%)" in out
