"""Issue 12's benchmark: what judging a candidate costs on a device, cold and on a pre-started child.

Judges each given candidate N times with a child started for it (cold, as `sandbox.execute` alone does) and
N times on pre-started children (warm, `sandbox.execution.warm.WarmPool`, as the worker does), and prints per mode and
candidate: the verdicts, seconds per device stage (start, calibration, load, correctness, timing, extra
shapes; median over the N runs), the device-held seconds (from handing the candidate to a child to that
child's end: median, min-max and IQR), and for warm runs what the pre-start cost off the device's clock and
how long each candidate waited for its spare (`acquire`, which is device time lost to throughput when no spare
is ready). `per candidate s` is the wall time from asking for a child to the verdict: the throughput figure.

The build and the baselines are prepared once before anything is counted (`prepare`, then one uncounted
cold judgement per task), so the figures are the device's, not the compiler's.

    python scripts/bench/bench_judge.py --device cpu -n 3                       # the CPU corpus: correct + rejected
    python scripts/bench/bench_judge.py --device cuda:0 -n 10 --json docs/results/bench-judge-h100.json
    python scripts/bench/bench_judge.py --device cuda:0 -n 10 tests/corpus/cuda/kl_div_fast.py ...
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import re
import statistics
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from sandbox import JudgeConfig, PreparedCandidate, Verdict, execute, prepare
from sandbox.execution.warm import WarmPool

ROOT = Path(__file__).resolve().parents[2]

CPU_DEFAULT = ["tests/corpus/cpu/kl_div_cpp_correct.py", "tests/corpus/cpu/kl_div_wrong_direction.py"]
CUDA_DEFAULT = ["tests/corpus/cuda/kl_div_fast.py", "tests/corpus/cuda/cross_entropy_fast.py",
                "tests/corpus/cuda/kl_div_wrong_direction.py", "tests/corpus/cuda/cross_entropy_wrong_target.py"]
DEVICE_STAGES = ("start", "calibration", "load", "correctness", "timing", "extra_shapes")
"""The stages that run while the device is held for the candidate."""
OFF_CLOCK = ("pre_start", "pre_calibration")
"""A pre-started child's start and calibration, paid before the hand-over (not the candidate's device time)."""


def task_of(path: Path) -> str:
    found = re.search(r"^task:\s*(\S+)", path.read_text()[:3000], re.MULTILINE)
    if not found:
        raise SystemExit(f"{path}: no `task:` line in its header")
    return found.group(1)


def spread(values: list[float]) -> dict[str, float]:
    """Median, min, max and quartiles of a sample."""
    ordered = sorted(values)
    q = statistics.quantiles(ordered, n=4) if len(ordered) > 1 else [ordered[0]] * 3
    return {"median": statistics.median(ordered), "min": ordered[0], "max": ordered[-1], "q25": q[0], "q75": q[2],
            "n": len(ordered)}


def row_of(verdict: Verdict, mode: str, wall_s: float, acquire_s: float) -> dict[str, Any]:
    cost = verdict.details.get("cost", {})
    return {"mode": mode, "status": verdict.status.value, "device_held_s": cost.get("device_held_s"),
            "per_candidate_s": wall_s, "acquire_wait_s": acquire_s,
            "stages": {s: verdict.stages.get(s, 0.0) for s in (*DEVICE_STAGES, *OFF_CLOCK, "device_gate_wait")},
            "pre_started": cost.get("pre_started"),
            "median_ms": verdict.performance.candidate.median_ms if verdict.performance else None,
            "timing": {k: v for k, v in verdict.details.get("timing", {}).items() if k in TIMING_KEPT},
            "diagnosis": verdict.diagnosis[:300]}


TIMING_KEPT = ("batch_size", "timed_batches", "timed_calls", "planned_calls", "claims_ms", "batch_claims_ms",
               "hidden_work", "hidden_work_batches", "host_over_events")
"""What a verdict's timing details say of the timing stage itself: how many batches it took, each call's time
by its place in the batch (the first call's lag), and which batches the host clock decided."""


def first_call_lag(rows: list[dict[str, Any]]) -> dict[str, Any] | None:
    """Median of each batch's first call over the median of its other calls, and how many runs stopped early."""
    ratios, stopped, hidden = [], 0, 0
    for r in rows:
        t = r.get("timing") or {}
        size, claims = t.get("batch_size", 0), t.get("claims_ms", [])
        if size < 2 or not claims:
            continue
        firsts, rest = claims[::size], [c for i, c in enumerate(claims) if i % size]
        ratios.append(statistics.median(firsts) / statistics.median(rest))
        stopped += t["timed_calls"] < t["planned_calls"]
        hidden += bool(t["hidden_work"])
    if not ratios:
        return None
    return {"first_over_rest": spread(ratios), "stopped_early": stopped, "host_clocked": hidden, "runs": len(ratios)}


def judge_cold(prepared: PreparedCandidate, device: str, config: JudgeConfig, n: int) -> list[dict[str, Any]]:
    rows = []
    for _ in range(n):
        started = time.monotonic()
        verdict = execute(prepared, device, config=config)
        rows.append(row_of(verdict, "cold", time.monotonic() - started, 0.0))
    return rows


def judge_warm(prepared: PreparedCandidate, device: str, config: JudgeConfig, n: int,
               pool: WarmPool) -> list[dict[str, Any]]:
    """Back to back, as the worker's executor does: ask for a child, judge, ask again."""
    rows = []
    for _ in range(n):
        started = time.monotonic()
        child = pool.acquire(device, prepared.task_id)
        acquired = time.monotonic() - started
        if child is None:
            raise SystemExit(f"no pre-started child on {device}: {pool.stats()}")
        verdict = execute(prepared, device, config=config, child=child)
        rows.append(row_of(verdict, "warm", time.monotonic() - started, acquired))
    return rows


def summarize(rows: list[dict[str, Any]]) -> dict[str, Any]:
    held = [r["device_held_s"] for r in rows if r["device_held_s"] is not None]
    out: dict[str, Any] = {
        "statuses": sorted({r["status"] for r in rows}),
        "device_held_s": spread(held) if held else None,
        "per_candidate_s": spread([r["per_candidate_s"] for r in rows]),
        "acquire_wait_s": spread([r["acquire_wait_s"] for r in rows]),
        "stages_median_s": {s: statistics.median(r["stages"][s] for r in rows)
                            for s in (*DEVICE_STAGES, *OFF_CLOCK, "device_gate_wait")},
    }
    lag = first_call_lag(rows)
    if lag:
        out["timing"] = lag
    pre = [r["pre_started"] for r in rows if r["pre_started"]]
    if pre:
        out["pre_start_median_s"] = {k: statistics.median(p[k] for p in pre)
                                     for k in ("host_s", "gate_wait_s", "device_s", "calibration_s", "idle_s")}
    return out


def print_table(results: list[dict[str, Any]]) -> None:
    head = (f"{'candidate':<34} {'mode':<5} {'status':<10} " + " ".join(f"{s[:11]:>11}" for s in DEVICE_STAGES)
            + f" {'held med':>8} {'held min-max':>13} {'held IQR':>13} {'per cand':>8}")
    print(head)
    for r in results:
        s = r["summary"]
        held = s["device_held_s"]
        stages = " ".join(f"{s['stages_median_s'][x]:>11.3f}" for x in DEVICE_STAGES)
        print(f"{r['candidate'][:34]:<34} {r['mode']:<5} {','.join(s['statuses'])[:10]:<10} {stages} "
              f"{held['median']:>8.3f} {held['min']:>6.2f}-{held['max']:<6.2f} {held['q25']:>6.2f}-{held['q75']:<6.2f} "
              f"{s['per_candidate_s']['median']:>8.2f}")
    print()
    for r in results:
        lag = r["summary"].get("timing")
        if lag:
            ratio = lag["first_over_rest"]
            print(f"  {r['candidate'][:34]:<34} timing: first call / rest of its batch {ratio['median']:.4f} "
                  f"(min {ratio['min']:.4f}, max {ratio['max']:.4f}); stopped early in {lag['stopped_early']} of "
                  f"{lag['runs']} runs; host-clocked in {lag['host_clocked']}")
    print()
    print("warm: paid off the device's clock per candidate (median s): host = bubblewrap + Python + import torch; "
          "device = context, tripwires, clock; calibration = empty timed calls; acquire = waited for a spare")
    for r in results:
        pre = r["summary"].get("pre_start_median_s")
        if pre:
            print(f"  {r['candidate'][:34]:<34} host {pre['host_s']:.2f}  gate wait {pre['gate_wait_s']:.2f}  "
                  f"device {pre['device_s']:.2f}  calibration {pre['calibration_s']:.2f}  idle {pre['idle_s']:.2f}  "
                  f"acquire {r['summary']['acquire_wait_s']['median']:.2f}  "
                  f"gate wait in timing {r['summary']['stages_median_s']['device_gate_wait']:.3f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("candidates", nargs="*", type=Path)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("-n", type=int, default=5, help="judgements per candidate and mode")
    parser.add_argument("--modes", default="cold,warm")
    parser.add_argument("--spares", type=int, default=3, help="spares kept (warm mode; as the worker)")
    parser.add_argument("--json", type=Path, help="also write every run and the summaries here")
    parser.add_argument("--build-root", type=Path, default=Path(tempfile.gettempdir()) / "bench-judge")
    parser.add_argument("--timing-budget-ms", type=float, help="override JudgeConfig.timing_budget_ms")
    parser.add_argument("--max-reps", type=int, help="override JudgeConfig.max_reps (CPU runs: keep them short)")
    args = parser.parse_args()
    cuda = args.device.startswith("cuda")
    paths = args.candidates or [ROOT / p for p in (CUDA_DEFAULT if cuda else CPU_DEFAULT)]
    overrides: dict[str, Any] = {}
    if args.timing_budget_ms is not None:
        overrides["timing_budget_ms"] = args.timing_budget_ms
    if args.max_reps is not None:
        overrides.update(max_reps=args.max_reps, min_reps=min(args.max_reps, JudgeConfig().min_reps))
    config = JudgeConfig(build_root=args.build_root / "builds", cache_root=args.build_root / "cache", **overrides)
    modes = [m for m in args.modes.split(",") if m]

    def build(path: Path) -> PreparedCandidate:
        started = time.monotonic()
        p = prepare(task_of(path), path.read_text(), target="cuda" if cuda else "cpu", config=config)
        if isinstance(p, Verdict):
            raise SystemExit(f"{path.name}: rejected before running ({p.status.value}): {p.diagnosis[:300]}")
        print(f"prepared {path.name}: {time.monotonic() - started:.1f} s (build cached: {p.compile_cached})",
              flush=True)
        return p

    with ThreadPoolExecutor(len(paths)) as builders:  # side by side, as the service's compile pool builds
        prepared: dict[Path, PreparedCandidate] = dict(zip(paths, builders.map(build, paths)))
    for task in dict.fromkeys(p.task_id for p in prepared.values()):  # baselines measured and cached, uncounted
        first = next(p for p in prepared.values() if p.task_id == task)
        execute(first, args.device, config=config)

    results = []
    for mode in modes:
        pool = WarmPool([args.device], config, spares=args.spares) if mode == "warm" else None
        try:
            for path, p in prepared.items():
                rows = (judge_warm(p, args.device, config, args.n, pool) if pool is not None
                        else judge_cold(p, args.device, config, args.n))
                results.append({"candidate": path.name, "task": p.task_id, "mode": mode, "runs": rows,
                                "summary": summarize(rows)})
                print(f"{mode} {path.name}: {[r['status'] for r in rows]} held "
                      f"{[round(r['device_held_s'], 3) for r in rows]}", flush=True)
        finally:
            if pool is not None:
                pool.close()
    print()
    print_table(results)
    if args.json:
        import torch

        from sandbox.environment import device_name

        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps({
            "date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"), "device": args.device,
            "device_name": device_name(args.device), "torch": torch.__version__, "command": " ".join(sys.argv),
            "n": args.n, "spares": args.spares, "config": {k: str(v) for k, v in vars(config).items()},
            "results": results}, indent=1))
        print(f"\nwritten: {args.json}")


if __name__ == "__main__":
    main()
