"""The trusted baseline measurement on every visible GPU: the cards of one host must agree.

Measures through the judge's own `sandbox.execution.baseline.get_baselines` (its trusted subprocess, the process's
current
device left at its default), with a cache of its own per device, once per device and task; prints each card's measured
bandwidth and eager time. Why: on a two-GPU H100 host (2026-11-25) the process measuring cuda:1 recorded its
events on cuda:0's stream; it cached 2.04 TB/s for a 3.0 TB/s card, and every honest fast kl_div kernel was judged
tamper_detected. `sandbox.child.timing.DeviceClock` now makes its device current; this is the check on the GPU.

    python3 scripts/gpu/check_device_baselines.py [--tasks kl_div cross_entropy] [--limit 0.05]

Exit status 1 when the cards of a task differ by more than --limit in bandwidth or eager median, 0 otherwise.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
import tempfile
from pathlib import Path

import torch

from reference import get_task
from sandbox.execution.baseline import get_baselines
from sandbox.config import JudgeConfig


def measure(task_id: str, device: str, work: Path) -> dict:
    """The eager baseline and bandwidth of one card, measured afresh: the cache is keyed by device model, which
    every card of a host shares, so each device gets a cache directory of its own."""
    config = dataclasses.replace(JudgeConfig(), cache_root=work / device.replace(":", ""), baselines=("eager",))
    return get_baselines(task_id, device, get_task(task_id).official_shape, config)


def spread(values: list[float]) -> float:
    return (max(values) - min(values)) / min(values)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tasks", nargs="+", default=["kl_div", "cross_entropy"])
    parser.add_argument("--limit", type=float, default=0.05, help="largest relative difference between cards")
    args = parser.parse_args()
    devices = [f"cuda:{i}" for i in range(torch.cuda.device_count())]
    if not devices:
        print("no GPU visible", file=sys.stderr)
        return 2
    print("| task | device | bandwidth TB/s | eager median ms |\n|---|---|---|---|")
    worst = 0.0
    with tempfile.TemporaryDirectory() as tmp:
        for task_id in args.tasks:
            results = {d: measure(task_id, d, Path(tmp)) for d in devices}
            for d, r in results.items():
                print(f"| {task_id} | {d} | {r['bandwidth_bytes_per_s'] / 1e12:.3f} | "
                      f"{r['baselines']['eager']['median_ms']:.4f} |", flush=True)
            if len(devices) > 1:
                worst = max(worst, spread([r["bandwidth_bytes_per_s"] for r in results.values()]),
                            spread([r["baselines"]["eager"]["median_ms"] for r in results.values()]))
    print(f"\n{len(devices)} device(s); largest difference between cards: {worst * 100:.1f}% "
          f"({'within' if worst <= args.limit else 'OVER'} {args.limit * 100:g}%)")
    return 0 if worst <= args.limit else 1


if __name__ == "__main__":
    raise SystemExit(main())
