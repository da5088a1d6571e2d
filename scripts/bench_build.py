"""Fresh-build benchmark: N distinct copies of a typical load_inline candidate, P built at once.

Each copy differs by a comment in its C++/CUDA sources, so every build misses the build cache and compiles
for real, through the judge's own path (`sandbox.pipeline.prepare`: the isolated compile child, ninja,
g++/nvcc). Runs each mode on a fresh build directory and prints per-build wall seconds (p50, p90, max)
and the total:

    without   torch's plain load_inline build
    with      the judge's build accelerators (the shared precompiled torch/extension.h); the one-time
              PCH build of the variants the candidate needs is timed separately, before the builds

    .venv/bin/python scripts/bench_build.py --target cpu -n 4 -p 2          # the development machine
    python scripts/bench_build.py --target cuda -n 16 -p 8 --jobs 2         # the H100 machine (16 cores)

--json FILE also writes every figure. The target in issue 12: a CUDA build's p50 <= 25 s with 8 in parallel
on 16 cores.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from sandbox import build_accel  # noqa: E402
from sandbox.config import JudgeConfig  # noqa: E402
from sandbox.pipeline import PreparedCandidate, prepare  # noqa: E402

DEFAULT = {"cpu": ROOT / "tests/corpus/cpu/kl_div_cpp_correct.py", "cuda": ROOT / "tests/corpus/cuda/kl_div_fast.py"}


def copies(source: str, n: int, tag: str) -> list[str]:
    """n sources that differ only by a comment at the top of every raw string (the C++/CUDA sources)."""
    return [re.sub(r'(r""")', lambda m, i=i: f'{m.group(1)}\n// bench copy {tag}-{i}\n', source) for i in range(n)]


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))]


def run_mode(name: str, sources: list[str], task: str, target: str, parallel: int, config: JudgeConfig) -> dict:
    def one(source: str) -> dict:
        started = time.monotonic()
        result = prepare(task, source, target=target, config=config)
        wall = time.monotonic() - started
        ok = isinstance(result, PreparedCandidate)
        return {"wall_s": round(wall, 2), "ok": ok, "cached": ok and result.compile_cached,
                "status": None if ok else str(result.status), "diagnosis": None if ok else result.diagnosis[:300]}

    started = time.monotonic()
    with ThreadPoolExecutor(parallel) as pool:
        results = list(pool.map(one, sources))
    total = time.monotonic() - started
    walls = [r["wall_s"] for r in results]
    summary = {"mode": name, "builds": len(results), "parallel": parallel, "ok": sum(r["ok"] for r in results),
               "p50_s": round(statistics.median(walls), 1), "p90_s": round(percentile(walls, 0.9), 1),
               "max_s": round(max(walls), 1), "total_s": round(total, 1), "per_build": results}
    print(f"{name:8s} builds={len(results)} parallel={parallel} ok={summary['ok']}  p50={summary['p50_s']:.1f} s  "
          f"p90={summary['p90_s']:.1f} s  max={summary['max_s']:.1f} s  total={summary['total_s']:.1f} s", flush=True)
    for r in results:
        if not r["ok"]:
            print(f"  failed: {r['status']}: {r['diagnosis']}", flush=True)
    return summary


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--target", choices=["cpu", "cuda"], default="cpu")
    parser.add_argument("--candidate", type=Path, help="a load_inline candidate (default: a corpus one per target)")
    parser.add_argument("--task", help="its task (default: its `task:` header line)")
    parser.add_argument("-n", type=int, default=4, help="distinct copies per mode")
    parser.add_argument("-p", type=int, default=2, help="builds at once")
    parser.add_argument("--jobs", type=int, help="ninja -j inside one build (JudgeConfig.compile_jobs)")
    parser.add_argument("--modes", default="without,with", help="comma-separated: without, with")
    parser.add_argument("--root", type=Path, help="where build and cache roots go (default: a new temp dir)")
    parser.add_argument("--json", type=Path, help="write every figure here")
    args = parser.parse_args(argv)

    path = args.candidate or DEFAULT[args.target]
    source = path.read_text()
    task = args.task or re.search(r"^task:\s*(\S+)", source, re.M).group(1)
    root = args.root or Path(tempfile.mkdtemp(prefix="bench-build-"))
    base = JudgeConfig()
    if args.jobs:
        base = replace(base, compile_jobs=args.jobs)
    print(f"candidate {path.relative_to(ROOT) if path.is_relative_to(ROOT) else path}, task {task}, "
          f"target {args.target}, {os.cpu_count()} CPUs, compile_jobs {base.compile_jobs}, root {root}", flush=True)
    report: dict = {"candidate": str(path), "target": args.target, "cpus": os.cpu_count(),
                    "compile_jobs": base.compile_jobs, "n": args.n, "parallel": args.p, "modes": []}
    stamp = str(int(time.time()))
    for mode in args.modes.split(","):
        build_root = root / f"builds-{mode}"
        cache_root = root / "cache"
        config = replace(base, build_root=build_root, cache_root=cache_root, precompiled_headers=mode == "with")
        if mode == "with":
            started = time.monotonic()
            variants = build_accel.warm(cache_root, args.target, build_accel.wanted_flag_sets(source))
            warm_s = time.monotonic() - started
            print(f"one-time PCH build: {len(variants)} variant(s) in {warm_s:.1f} s", flush=True)
            report["pch_warm_s"] = round(warm_s, 1)
        report["modes"].append(run_mode(mode, copies(source, args.n, f"{mode}-{stamp}"), task, args.target, args.p,
                                        config))
    if args.json:
        args.json.write_text(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
