"""The kernel trace on a GPU (issue 28): what it costs the ranked medians, and what it says about the hostile corpus.

1. The honest kernels judged in rounds that alternate the trace on and off (`JudgeConfig.trace`; each round on
   pre-started children of its own mode, as the worker judges, the other mode's pool closed first so no spare
   starts beside a timed candidate). Per kernel: the median of its ranked medians with and without, the
   difference in %, and the spread (each mode's min-max across rounds, and the paired per-round differences).
   Every honest verdict must be `correct` with the trace on (no honest kernel flagged).
2. The hostile CUDA corpus judged with the trace on, each verdict against its file's `expect:` (and `diagnosis:`,
   `min_ms`), the trace's status and rule beside it.
3. `trace_check.md` and `trace_check.json` under `--out`, rewritten after every verdict: a run cut off by its
   time limit still leaves what it judged.

GPU machine: `source scripts/gpu/device_env.sh && python3 scripts/gpu/trace_check.py --out results/trace`
Here (a smoke test of the script on the CPU corpus): `python -m scripts.gpu.trace_check --device cpu --rounds 1
--honest kl_div_cpp_correct.py --hostile c4_background_thread.py c7_mutate_inputs.py --out /tmp/trace-smoke`
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from pathlib import Path

from sandbox import JudgeConfig, Verdict, execute, prepare
from sandbox.candidate import PreparedCandidate
from sandbox.environment import describe
from sandbox.execution.warm import WarmPool
from scripts.gpu.gpu_acceptance import matches, meta

ROOT = Path(__file__).resolve().parents[2]
HONEST = ["kl_div_fast.py", "cross_entropy_fast.py", "cross_entropy_triton.py", "kl_div_train_fused.py"]
"""The default honest set: the fastest CUDA kernel of each task (where 1% is a few microseconds), a Triton kernel
and a training step (its backward launched by autograd's own thread): 24 judgings in three rounds, ~4 minutes of
an H100 with the builds; `--honest` names others (tests/corpus/cuda)."""


def corpus(device: str) -> tuple[Path, Path]:
    kind = "cuda" if device.startswith("cuda") else "cpu"
    return ROOT / "tests" / "corpus" / kind, ROOT / "tests" / "corpus" / "hostile" / kind


def build(files: list[Path], target: str, config: JudgeConfig, workers: int) -> dict[Path, PreparedCandidate | Verdict]:
    with ThreadPoolExecutor(workers) as pool:
        return dict(zip(files, pool.map(lambda p: prepare(meta(p)["task"], p.read_text(), target=target,
                                                          config=replace(config, compile_jobs=4)), files)))


def judge_all(paths: list[Path], prepared: dict, device: str, config: JudgeConfig, warm: bool,
              each: Callable[[Path, Verdict, float], None]) -> None:
    """Judge `paths` (sorted by task, so a spare serves each) on a pool of this config's children, then close it."""
    pool = WarmPool([device], config, spares=2) if warm else None
    try:
        for path in sorted(paths, key=lambda p: (meta(p)["task"], p.name)):
            p = prepared[path]
            started = time.monotonic()
            if isinstance(p, Verdict):
                v = p
            else:
                child = pool.acquire(device, p.task_id) if pool else None
                v = execute(p, device, config=config, child=child)
            each(path, v, time.monotonic() - started)
    finally:
        if pool is not None:
            pool.close()


def spread_pct(values: list[float]) -> float:
    return 100 * (max(values) - min(values)) / statistics.mean(values) if values else float("nan")


def summary_rows(honest: dict[str, dict[str, list]]) -> tuple[list[str], list[dict]]:
    lines, table = [], []
    for name, runs in sorted(honest.items()):
        on, off = runs["on"], runs["off"]
        if not on or not off:
            lines.append(f"| {name} | {len(on)} on, {len(off)} off: not enough correct runs |  |  |  |  |")
            continue
        m_on, m_off = statistics.median(on), statistics.median(off)
        paired = [100 * (a - b) / b for a, b in zip(on, off)]
        diff = 100 * (m_on - m_off) / m_off
        table.append({"kernel": name, "on_ms": on, "off_ms": off, "median_on_ms": m_on, "median_off_ms": m_off,
                      "diff_pct": diff, "paired_diff_pct": paired, "spread_on_pct": spread_pct(on),
                      "spread_off_pct": spread_pct(off)})
        lines.append(f"| {name} | {m_on:.4f} ({', '.join(f'{x:.4f}' for x in on)}) | "
                     f"{m_off:.4f} ({', '.join(f'{x:.4f}' for x in off)}) | {diff:+.2f}% | "
                     f"{min(paired):+.2f}% .. {max(paired):+.2f}% | {spread_pct(on):.2f}% / {spread_pct(off):.2f}% |")
    return lines, table


def trace_cell(v: Verdict) -> str:
    trace = v.details.get("trace") or {}
    status = trace.get("status", "-")
    if trace.get("rule"):
        status += f" ({trace['rule']})"
    launches = (trace.get("per_call") or {}).get("launches")
    if launches:
        status += f", launches/call {statistics.median(launches):g}"
    return status


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", default="cuda:0")
    parser.add_argument("--rounds", type=int, default=3, help="alternations of the trace on and off")
    parser.add_argument("--honest", nargs="*", default=None, help="honest file names (default: HONEST)")
    parser.add_argument("--hostile", nargs="*", default=None, help="hostile file names (default: all)")
    parser.add_argument("--skip-honest", action="store_true")
    parser.add_argument("--skip-hostile", action="store_true")
    parser.add_argument("--cold", action="store_true", help="a fresh child per judging instead of pre-started ones")
    parser.add_argument("--compile-workers", type=int, default=8)
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    base = JudgeConfig()
    target = "cuda" if args.device.startswith("cuda") else "cpu"
    honest_dir, hostile_dir = corpus(args.device)
    honest_names = args.honest if args.honest is not None else (HONEST if target == "cuda" else
                                                                 ["kl_div_cpp_correct.py",
                                                                  "cross_entropy_cpp_correct.py"])
    honest_files = [] if args.skip_honest else [honest_dir / n for n in honest_names]
    hostile_files = [] if args.skip_hostile else sorted(
        p for p in hostile_dir.glob("*.py") if args.hostile is None or p.name in args.hostile)
    hostile_files = [p for p in hostile_files if meta(p).get("task")]

    t0 = time.monotonic()
    prepared = build(honest_files + hostile_files, target, base, args.compile_workers)
    print(f"built {len(prepared)} candidates in {time.monotonic() - t0:.0f} s", flush=True)
    env = describe(args.device, "see verdicts")
    honest: dict[str, dict[str, list]] = {p.name: {"on": [], "off": []} for p in honest_files}
    honest_flags: list[str] = []
    hostile_rows: list[str] = []
    verdicts: dict[str, list] = {}

    def write() -> None:
        lines, table = summary_rows(honest)
        hostile_ok = sum("| yes |" in r for r in hostile_rows)
        text = ["# Kernel trace check (issue 28)", "",
                f"Device: {env.device_name}, driver {env.driver}, torch {env.torch}, CUDA {env.cuda}; "
                f"{args.rounds} rounds alternating the trace on and off; {time.monotonic() - t0:.0f} s so far.", "",
                "## Ranked medians with and without the trace", "",
                "| kernel | median ms, trace on (per round) | median ms, trace off (per round) | on vs off | "
                "paired per round | spread on / off |", "|---|---|---|---|---|---|", *lines, "",
                f"Honest verdicts flagged with the trace on: {len(honest_flags)}" +
                ("".join(f"\n- {f}" for f in honest_flags)), "",
                f"## Hostile corpus with the trace on: {hostile_ok}/{len(hostile_rows)} as declared", "",
                "| candidate | expected | verdict | as declared | trace | diagnosis |", "|---|---|---|---|---|---|",
                *hostile_rows]
        (args.out / "trace_check.md").write_text("\n".join(text) + "\n")
        (args.out / "trace_check.json").write_text(json.dumps(
            {"device": env.model_dump(), "rounds": args.rounds, "honest": table, "honest_flagged": honest_flags,
             "hostile_as_declared": hostile_ok, "hostile_total": len(hostile_rows), "verdicts": verdicts}, indent=1))

    def honest_verdict(mode: str) -> Callable[[Path, Verdict, float], None]:
        def each(path: Path, v: Verdict, wall: float) -> None:
            verdicts.setdefault(f"{path.name} trace {mode}", []).append(json.loads(v.model_dump_json()))
            if v.status.value == "correct" and v.performance is not None and v.ranked:
                honest[path.name][mode].append(v.performance.candidate.median_ms)
            elif mode == "on" or v.status.value != "correct":
                honest_flags.append(f"{path.name} (trace {mode}): {v.status.value}: {v.diagnosis[:200]}")
            print(f"trace {mode:3} {path.name}: {v.status.value} "
                  f"{v.performance.candidate.median_ms if v.performance else '-'} ms [{trace_cell(v)}] {wall:.1f} s",
                  flush=True)
            write()
        return each

    for round_ in range(args.rounds if honest_files else 0):
        modes = ("on", "off") if round_ % 2 == 0 else ("off", "on")  # alternate which goes first
        for mode in modes:
            config = replace(base, trace=mode == "on", check_extra_shapes=False)
            judge_all(honest_files, prepared, args.device, config, not args.cold, honest_verdict(mode))

    def hostile_verdict(path: Path, v: Verdict, wall: float) -> None:
        m = meta(path)
        verdicts[path.name] = [json.loads(v.model_dump_json())]
        ok = "yes" if matches(m, v) else "**NO**"
        diagnosis = v.diagnosis.replace("\n", " ").replace("|", "\\|")[:160]
        hostile_rows.append(f"| {path.name} | {m.get('expect')} | {v.status.value} | {ok} | {trace_cell(v)} | "
                            f"{diagnosis} |")
        print(hostile_rows[-1], flush=True)
        write()

    if hostile_files:
        judge_all(hostile_files, prepared, args.device, replace(base, trace=True), not args.cold, hostile_verdict)
    write()
    print((args.out / "trace_check.md").read_text())
    bad = honest_flags + [r for r in hostile_rows if "**NO**" in r]
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
