"""Do pre-started children keep up? A `WarmPool` opened as a worker opens it, asked for a spare at a candidate's pace.

The device waits whenever a candidate is claimed and no spare is ready (`acquire_wait_s`, "waited for a spare" in
docs/results/fleet-h100x2-2026-11-26.md). This opens a real pool (bubblewrap children, as the worker starts them),
asks it for a spare right away, holds each one for `--hold` seconds (a candidate's device time: ~0.5 s for a
rejected one, 1-2 s for a timed one on an H100), discards it and asks again, `--asks` times. It reports:

- per ask: how many spares were ready when asked, and how long the ask waited;
- per spare handed out: its time from spawn to `Started` (the CPU-only start), waiting for a start slot and for
  the device gate, its device set-up, and spawn to ready; and from the pool's opening to ready;
- each with its spread (median, quartiles, min, max).

On the CPU device the pool's scheduling is the GPU's (`between_candidates=False`): spares start beside the
candidates, which here only sleep, so that what is measured is the supply, not a CPU candidate's timing.

    python3 scripts/bench/bench_spare_supply.py --device cpu --spares 8 --asks 16 --hold 0.5 --json OUT.json
"""

from __future__ import annotations

import argparse
import inspect
import json
import os
import statistics
import tempfile
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

from sandbox.config import JudgeConfig
from sandbox.execution.warm import WarmPool


def spread(values: list[float]) -> dict[str, float | int]:
    """Median, quartiles and range of `values` (seconds), and how many."""
    if not values:
        return {"n": 0}
    ordered = sorted(values)
    quartiles = statistics.quantiles(ordered, n=4) if len(ordered) > 1 else [ordered[0]] * 3
    return {"n": len(ordered), "median": round(statistics.median(ordered), 3), "q1": round(quartiles[0], 3),
            "q3": round(quartiles[2], 3), "min": round(ordered[0], 3), "max": round(ordered[-1], 3)}


def show(name: str, values: list[float]) -> str:
    s = spread(values)
    if not s["n"]:
        return f"- {name}: none"
    return (f"- {name}: median {s['median']:.2f} s (IQR {s['q1']:.2f}-{s['q3']:.2f}, min {s['min']:.2f}, "
            f"max {s['max']:.2f}, n={s['n']})")


def pool_options(args: argparse.Namespace) -> dict[str, Any]:
    """The pool's keyword arguments this version of it accepts (so that the same script measures it before and
    after a change of its scheduling)."""
    accepted = inspect.signature(WarmPool).parameters
    wanted = {"spares": args.spares, "task_id": args.task, "between_candidates": False, "standby": args.standby}
    return {k: v for k, v in wanted.items() if k in accepted and v is not None}


def measure(args: argparse.Namespace, config: JudgeConfig) -> dict[str, Any]:
    options = pool_options(args)
    asks: list[dict[str, Any]] = []
    spares: list[dict[str, Any]] = []
    opened = time.monotonic()
    with WarmPool([args.device], config, **options) as pool:
        if args.fill:
            # As in a worker that has been up a while (the fleet runs' warm-up batch): the stock full, then a run
            # of candidates.
            full = args.spares + (args.standby or 0)
            while sum(pool.stats()[args.device].get(k, 0) for k in ("ready", "standby")) < full:
                time.sleep(0.2)  # polling a pool that may predate `wait_until`; a bench, not a test
            opened = time.monotonic()
        for i in range(args.asks):
            ready_when_asked = pool.stats()[args.device]["ready"]
            child = pool.acquire(args.device, args.task)
            if child is None:
                asks.append({"ask": i, "ready_when_asked": ready_when_asked, "served": False})
                continue
            asks.append({"ask": i, "ready_when_asked": ready_when_asked, "served": True,
                         "wait_s": round(child.acquire_wait_s, 3), "at_s": round(time.monotonic() - opened, 3)})
            cost = child.cost()
            spares.append({"spawned_s": round(child.spawned - opened, 3), "host_s": cost["host_s"],
                           "slot_wait_s": cost.get("slot_wait_s", 0.0), "gate_wait_s": cost["gate_wait_s"],
                           "device_s": cost["device_s"], "calibration_s": cost["calibration_s"],
                           "start_to_ready_s": round(child.ready_at - child.spawned, 3),
                           "open_to_ready_s": round(child.ready_at - opened, 3)})
            time.sleep(args.hold)  # the candidate's device time, simulated: what is measured is the supply
            child.discard()
        stats = pool.stats()[args.device]
    return {"options": {k: v for k, v in options.items() if k != "task_id"}, "asks": asks, "spares": spares,
            "pool": stats, "wall_s": round(time.monotonic() - opened, 2)}


def report(result: dict[str, Any]) -> str:
    asks, spares = result["asks"], result["spares"]
    waits = [a["wait_s"] for a in asks if a["served"]]
    lines = [f"# spare supply: {result['device']}, {result['cpus']} CPUs, load {result['loadavg']}, "
             f"{result['options']}, start slots {result['start_slots']}, hold {result['hold_s']} s"
             + (", stock full before the first ask" if result["filled_first"] else ", asked from the pool's opening"),
             "",
             f"- asks served: {sum(a['served'] for a in asks)} of {len(asks)}; found a spare ready: "
             f"{sum(a['ready_when_asked'] > 0 for a in asks)}; waited in all {sum(waits):.1f} s "
             f"(wall {result['wall_s']:.1f} s)",
             f"- ready when asked, per ask: {[a['ready_when_asked'] for a in asks]}",
             show("an ask's wait", waits),
             show("the first ask's wait", waits[:1]),
             show("a spare's CPU-only start (spawn to Started)", [s["host_s"] for s in spares]),
             show("waiting for a start slot", [s["slot_wait_s"] for s in spares]),
             show("waiting for the device gate", [s["gate_wait_s"] for s in spares]),
             show("device set-up (Begin to Ready)", [s["device_s"] for s in spares]),
             show("a spare's spawn to ready", [s["start_to_ready_s"] for s in spares]),
             show("the first ask (the pool's opening, unless filled first) to a spare ready",
                  [s["open_to_ready_s"] for s in spares]),
             f"- pool at the end: {result['pool']}"]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--task", default="kl_div")
    parser.add_argument("--spares", type=int, default=8, help="ready spares per device (the pool's `spares`)")
    parser.add_argument("--standby", type=int, help="host-started spares per device (pools that have them)")
    parser.add_argument("--start-slots", type=int, help="host-wide CPU-only starts at once (JudgeConfig)")
    parser.add_argument("--asks", type=int, default=16)
    parser.add_argument("--hold", type=float, default=0.5, help="seconds each spare is held (a candidate)")
    parser.add_argument("--fill", action="store_true", help="wait until the pool's stock is full before asking")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="spare-supply-") as tmp:
        config = JudgeConfig(build_root=Path(tmp) / "builds", cache_root=Path(tmp) / "cache",
                             memory_limit_bytes=3 << 30)
        if args.start_slots is not None:
            config = replace(config, spare_start_slots=args.start_slots)
        result = {"device": args.device, "cpus": os.cpu_count(), "loadavg": [round(x, 2) for x in os.getloadavg()],
                  "hold_s": args.hold, "filled_first": args.fill,
                  "start_slots": config.spare_start_slots if "standby" in pool_options(args) else "uncapped",
                  "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), **measure(args, config)}
    print(report(result))
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
