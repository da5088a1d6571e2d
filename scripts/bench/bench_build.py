"""Fresh-build benchmark: N distinct copies of a typical load_inline candidate, P built at once.

Each copy differs by a comment in its C++/CUDA sources, so every build misses the build cache and compiles
for real, through the judge's own path (`sandbox.pipeline.prepare`: the isolated compile child, ninja,
g++/nvcc). Runs each mode on a fresh build directory and prints per-build wall seconds (p50, p90, max)
and the total:

    without   torch's plain load_inline build
    with      the shared precompiled torch/extension.h for main.cpp (its subset without torch's C++ frontend
              first, sandbox/build/accel.py); the one-time PCH build of the variants the candidate needs is
              timed separately, before the builds
    slim      the judge's default: that PCH, and for CUDA the .cu compiled against slim torch headers
              (sandbox/child/build/slim_headers.py); each build says whether its .cu built slim or fell back, and which
              PCH its main.cpp was built with
    slim-full-main  slim, but main.cpp with the full PCH only (the judge with JUDGE_PCH_SUBSET=0)
    split     slim, and nvcc's two front ends side by side (sandbox/build/nvcc_split.py, under bubblewrap only)

Each build's steps come from ninja's log (the .cu object, main.cpp, the link, what lies outside ninja) and,
for a split .cu, the two lanes and the host compile.

    .venv/bin/python scripts/bench/bench_build.py --target cpu -n 4 -p 2          # the development machine
    python scripts/bench/bench_build.py --target cuda -n 16 -p 8 --jobs 2         # the H100 machine (16 cores)

--json FILE also writes every figure. The target in issue 12: a CUDA build's p50 <= 25 s with 8 in parallel
on 16 cores.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import tempfile
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from pathlib import Path

from sandbox.build import accel as build_accel
from sandbox.build import warm as build_warm
from sandbox.build import nvcc_split
from sandbox.config import JudgeConfig
from sandbox.pipeline import PreparedCandidate, prepare

ROOT = Path(__file__).resolve().parents[2]

DEFAULT = {"cpu": ROOT / "tests/corpus/cpu/kl_div_cpp_correct.py", "cuda": ROOT / "tests/corpus/cuda/kl_div_fast.py"}


def copies(source: str, n: int, tag: str) -> list[str]:
    """n sources that differ only by a comment at the top of every raw string (the C++/CUDA sources)."""
    return [re.sub(r'(r""")', lambda m, i=i: f'{m.group(1)}\n// bench copy {tag}-{i}\n', source) for i in range(n)]


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))]


def ninja_steps(build_dir: Path) -> dict:
    """Seconds of each step of one build, from the `.ninja_log` of its extension (start and end in ms): the
    `.cu` object, main.cpp's, the link, ninja's whole span; outside_ninja is filled in by the caller."""
    steps: dict = {}
    for log in build_dir.rglob(".ninja_log"):
        rows = [line.split("\t") for line in log.read_text().splitlines() if line and not line.startswith("#")]
        rows = [(int(r[0]), int(r[1]), r[3]) for r in rows if len(r) >= 4]
        for start, end, output in rows:
            step = "cu" if output.endswith(".cuda.o") else "link" if output.endswith(".so") else "cpp"
            steps[step] = round(steps.get(step, 0.0) + (end - start) / 1000, 2)
        if rows:
            span = (max(r[1] for r in rows) - min(r[0] for r in rows)) / 1000
            steps["ninja"] = round(steps.get("ninja", 0.0) + span, 2)
    for record in build_dir.rglob(f"*{nvcc_split.RECORD_SUFFIX}"):  # the .cu went through sandbox/build/nvcc_split.py
        split = json.loads(record.read_text())
        steps["split"] = True
        for key in ("host_s", "device_s", "compile_s"):
            steps[f"split_{key}"] = split.get(key)
    return steps


def run_mode(name: str, sources: list[str], task: str, target: str, parallel: int, config: JudgeConfig) -> dict:
    def one(source: str) -> dict:
        started = time.monotonic()
        result = prepare(task, source, target=target, config=config)
        wall = time.monotonic() - started
        ok = isinstance(result, PreparedCandidate)
        log = result.compile_log if ok else ""
        headers = "slim" if "built against the slim torch headers" in log else (
            "full (fallback)" if "needs torch's full headers" in log else "full")
        main_pch = "subset" if "main.cpp built with the subset" in log else (
            "full (fallback)" if "main.cpp needs more of torch/extension.h" in log else
            "full" if "offered the precompiled torch/extension.h" in log else "none")
        steps = ninja_steps(config.build_root / result.build_key) if ok else {}
        if "ninja" in steps:
            steps["outside_ninja"] = round(wall - steps["ninja"], 2)
        return {"wall_s": round(wall, 2), "ok": ok, "cached": ok and result.compile_cached, "cu_headers": headers,
                "main_pch": main_pch, "steps": steps, "status": None if ok else str(result.status),
                "diagnosis": None if ok else result.diagnosis[:300]}

    started = time.monotonic()
    with ThreadPoolExecutor(parallel) as pool:
        results = list(pool.map(one, sources))
    total = time.monotonic() - started
    walls = [r["wall_s"] for r in results]
    summary = {"mode": name, "builds": len(results), "parallel": parallel, "ok": sum(r["ok"] for r in results),
               "p50_s": round(statistics.median(walls), 1), "p90_s": round(percentile(walls, 0.9), 1),
               "max_s": round(max(walls), 1), "total_s": round(total, 1),
               "cu_headers": dict(Counter(r["cu_headers"] for r in results)),
               "main_pch": dict(Counter(r["main_pch"] for r in results)), "per_build": results}
    summary["split_nvcc"] = sum(bool(r.get("steps", {}).get("split")) for r in results)
    for step in ("cu", "cpp", "link", "ninja", "outside_ninja", "split_host_s", "split_device_s", "split_compile_s"):
        values = [r["steps"][step] for r in results if r.get("steps", {}).get(step) is not None]
        if values:
            summary[f"{step}_p50_s"] = round(statistics.median(values), 1)
    print(f"{name:14s} builds={len(results)} parallel={parallel} ok={summary['ok']}  p50={summary['p50_s']:.1f} s  "
          f"p90={summary['p90_s']:.1f} s  max={summary['max_s']:.1f} s  total={summary['total_s']:.1f} s  "
          f".cu headers {summary['cu_headers']}, main.cpp PCH {summary['main_pch']}", flush=True)
    print("         p50 of the steps (ninja's log): " + ", ".join(
        f"{step} {summary[f'{step}_p50_s']:.1f} s" for step in ("cu", "cpp", "link", "ninja", "outside_ninja",
                                                              "split_host_s", "split_device_s", "split_compile_s")
        if f"{step}_p50_s" in summary) + f"; .cu split in two lanes: {summary['split_nvcc']}", flush=True)
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
    parser.add_argument("--modes", default="without,with,slim,split",
                        help="comma-separated: without, with, slim, slim-full-main, split")
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
        config = replace(base, build_root=build_root, cache_root=cache_root, precompiled_headers=mode != "without",
                         slim_headers=mode in ("slim", "slim-full-main", "split"), split_nvcc=mode == "split",
                         pch_subset=mode != "slim-full-main")
        if mode != "without":
            started = time.monotonic()
            variants = build_warm.warm(cache_root, args.target, build_accel.wanted_flag_sets(source))
            warm_s = time.monotonic() - started
            print(f"one-time PCH build: {len(variants)} variant(s) in {warm_s:.1f} s", flush=True)
            report["pch_warm_s"] = round(warm_s, 1)
        report["modes"].append(run_mode(mode, copies(source, args.n, f"{mode}-{stamp}"), task, args.target, args.p,
                                        config))
    if args.json:
        args.json.write_text(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
