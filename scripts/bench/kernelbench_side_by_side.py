"""Issue 12's side by side: KernelBench's own evaluation of our corpus kernels, on the same card as our judge.

KernelBench is not vendored: point --kernelbench at a checkout holding its `src/kernelbench` and
`KernelBench/level1/{95,98}_*.py` (`scripts/gpu/fetch_device_deps.sh` exports them into `.kernelbench/`, with the
commit in `.kernelbench/COMMIT`; carry it to the GPU machine). Each candidate is evaluated the way its
`scripts/eval_from_generations.py` evaluates one sample: built first (`build_compile_cache`, on the CPU, all in
parallel), then `eval_kernel_against_ref` in a fresh process with its defaults there: seed 42, 5 correctness
trials, 100 performance trials, `cuda_event` timing (an L2 flush before each call), the excessive-speedup
check. We record the process's wall time from start to exit (what that procedure holds a GPU for: its
interpreter, CUDA context, inputs made on the host, trials and timing), the eval call's own time, and its
result: compiled, correct, runtime (mean ms), reference runtime.

With --ours (`gpu_acceptance.py`'s verdicts.json, same card) each row also shows our verdict, our median and
the device seconds our judge held (`details.cost.device_held_s`).

KernelBench imports an LLM client stack at import time (dotenv, tqdm, openai, litellm, requests) that the
GPU machine lacks and this evaluation never calls: missing ones are replaced by empty modules in the child.

    python3 scripts/bench/kernelbench_side_by_side.py --kernelbench .kernelbench --ours results/verdicts.json \\
        --out results/ tests/corpus/cuda/kl_div_fast.py ...
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
import types
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
PROBLEMS = {"kl_div": "98_KLDivLoss.py", "cross_entropy": "95_CrossEntropyLoss.py"}
TASK_LINE = re.compile(r"^task:\s*(\S+)", re.MULTILINE)
EXPECT_LINE = re.compile(r"^expect:\s*(\S+)", re.MULTILINE)
EVAL_TIMEOUT_S = 300


def backend_of(source: str) -> str:
    return "cuda" if "load_inline" in source else "triton"


def stub_missing_modules() -> None:
    """Empty stand-ins for the LLM client modules KernelBench imports but this evaluation never uses."""
    stand_ins: dict[str, dict[str, Any]] = {
        "dotenv": {"load_dotenv": lambda *a, **k: None}, "tqdm": {"tqdm": lambda it=None, *a, **k: it},
        "openai": {"OpenAI": object}, "litellm": {"completion": None}, "requests": {}}
    for name, attributes in stand_ins.items():
        try:
            __import__(name)
        except ImportError:
            module = types.ModuleType(name)
            module.__dict__.update(attributes)
            sys.modules[name] = module


def child(kernelbench: Path, mode: str, task: str, candidate: Path, build_dir: Path) -> dict[str, Any]:
    """One build or one evaluation, in this (fresh) process, which has KernelBench's src/ on PYTHONPATH (run_child);
    returns what KernelBench returned."""
    stub_missing_modules()
    from kernelbench import eval as kb_eval

    source = candidate.read_text()
    started = time.monotonic()
    if mode == "build":
        ok, _, error = kb_eval.build_compile_cache(source, build_dir=str(build_dir))
        return {"built": ok, "error": error, "build_s": time.monotonic() - started}
    import torch

    result = kb_eval.eval_kernel_against_ref(
        (kernelbench / "KernelBench" / "level1" / PROBLEMS[task]).read_text(), source, seed_num=42,
        num_correct_trials=5, num_perf_trials=100, measure_performance=True, timing_method="cuda_event",
        build_dir=str(build_dir), device=torch.device("cuda:0"), backend=backend_of(source))
    out = {"eval_s": time.monotonic() - started}
    if result is None:  # KernelBench's answer to a lock-file error: "please retry"
        return {**out, "compiled": None}
    data = result.model_dump() if hasattr(result, "model_dump") else result.dict()
    return {**out, **json.loads(json.dumps(data, default=str))}


def run_child(kernelbench: Path, mode: str, task: str, candidate: Path, build_dir: Path) -> dict[str, Any]:
    started = time.monotonic()
    path = os.pathsep.join(p for p in (str(kernelbench / "src"), os.environ.get("PYTHONPATH")) if p)
    try:
        done = subprocess.run([sys.executable, __file__, "--child", mode, task, str(candidate), str(build_dir),
                               "--kernelbench", str(kernelbench)], capture_output=True, text=True,
                              timeout=EVAL_TIMEOUT_S, env={**os.environ, "PYTHONPATH": path})
    except subprocess.TimeoutExpired:
        return {"process_s": time.monotonic() - started, "error": f"did not finish in {EVAL_TIMEOUT_S} s"}
    wall = time.monotonic() - started
    last = done.stdout.strip().splitlines()[-1:] or [""]
    try:
        reply = json.loads(last[0])
    except json.JSONDecodeError:
        reply = {"error": f"exit {done.returncode}: {(done.stderr or done.stdout)[-600:]}"}
    return {**reply, "process_s": wall}


def ours_for(ours: dict[str, Any], path: Path) -> dict[str, Any] | None:
    for name, verdict in ours.items():
        if Path(name).name == path.name:
            return verdict
    return None


def kernelbench_says(r: dict[str, Any]) -> str:
    if "error" in r and r.get("compiled") is None:
        return f"error: {str(r['error'])[:80]}"
    if not r.get("compiled"):
        return "compile failure"
    if not r.get("correctness"):
        meta = r.get("metadata", {})
        why = meta.get("runtime_error_name") or meta.get("correctness_issue") or meta.get("correctness_trials", "")
        return f"incorrect {str(why)[:60]}"
    flag = " (excessive speedup flagged)" if r.get("metadata", {}).get("excessive_speedup") else ""
    return f"correct{flag}"


def main() -> int:
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        parser = argparse.ArgumentParser()
        parser.add_argument("--child", nargs=4, metavar=("MODE", "TASK", "CANDIDATE", "BUILD_DIR"))
        parser.add_argument("--kernelbench", type=Path, required=True)
        args = parser.parse_args()
        mode, task, candidate, build_dir = args.child
        print(json.dumps(child(args.kernelbench, mode, task, Path(candidate), Path(build_dir)), default=str))
        return 0

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("candidates", nargs="+", type=Path)
    parser.add_argument("--kernelbench", type=Path, default=ROOT / ".kernelbench")
    parser.add_argument("--ours", type=Path, help="gpu_acceptance.py's verdicts.json from the same card")
    parser.add_argument("--out", type=Path, default=ROOT / "results")
    parser.add_argument("--build-workers", type=int, default=8)
    parser.add_argument("--work", type=Path, help="build directories (default: a new temp dir); reused if given")
    parser.add_argument("--build-only", action="store_true", help="only the CPU stage (run early, then again)")
    args = parser.parse_args()
    args.kernelbench = args.kernelbench.resolve()
    args.out.mkdir(parents=True, exist_ok=True)
    ours = json.loads(args.ours.read_text()) if args.ours and args.ours.exists() else {}
    commit_file = args.kernelbench / "COMMIT"
    commit = commit_file.read_text().strip() if commit_file.exists() else "unknown"
    work = args.work.resolve() if args.work else Path(tempfile.mkdtemp(prefix="kernelbench-"))
    jobs = [(p.resolve(), TASK_LINE.search(p.read_text())[1], work / p.stem) for p in args.candidates]
    jobs = [j for j in jobs if j[1] in PROBLEMS]

    os.environ.setdefault("MAX_JOBS", "4")
    started = time.monotonic()
    with ThreadPoolExecutor(args.build_workers) as pool:  # the CPU stage, before any GPU work, as theirs does
        builds = list(pool.map(lambda j: run_child(args.kernelbench, "build", j[1], j[0], j[2])
                               if backend_of(j[0].read_text()) == "cuda" else {"built": None}, jobs))
    print(f"built {len(jobs)} candidates in {time.monotonic() - started:.0f} s", flush=True)
    if args.build_only:
        return 0

    rows = []
    for (path, task, build_dir), build in zip(jobs, builds):
        result = run_child(args.kernelbench, "eval", task, path, build_dir)
        verdict = ours_for(ours, path)
        row = {"candidate": path.name, "task": task, "expect": (EXPECT_LINE.search(path.read_text()) or [None, ""])[1],
               "kernelbench_build_s": build.get("process_s"), "kernelbench": result, "kernelbench_says":
               kernelbench_says(result)}
        if verdict:
            perf = verdict.get("performance") or {}
            row["ours"] = {"status": verdict["status"], "median_ms": (perf.get("candidate") or {}).get("median_ms"),
                           "device_held_s": verdict.get("details", {}).get("cost", {}).get("device_held_s")}
        rows.append(row)
        print(json.dumps({k: v for k, v in row.items() if k != "kernelbench"} |
                         {"process_s": result.get("process_s"), "runtime": result.get("runtime")}), flush=True)

    lines = [f"KernelBench {commit[:12]} `eval_kernel_against_ref` (seed 42, 5 correctness trials, 100 perf trials, "
             "cuda_event) beside our judge, same card", "",
             "| candidate | expected | KernelBench says | KB mean ms | KB ref mean ms | KB GPU process s | "
             "KB eval call s | our verdict | our median ms | our device-held s |", "|" + "---|" * 10]
    for r in rows:
        kb, o = r["kernelbench"], r.get("ours") or {}
        runtime = kb.get("runtime") if (kb.get("runtime") or -1) > 0 else None
        ref = kb.get("ref_runtime") if (kb.get("ref_runtime") or -1) > 0 else None
        cells = [r["candidate"], r["expect"], r["kernelbench_says"], f"{runtime:.4f}" if runtime else "-",
                 f"{ref:.4f}" if ref else "-", f"{kb.get('process_s', 0):.1f}",
                 f"{kb['eval_s']:.1f}" if kb.get("eval_s") else "-", o.get("status", "-"),
                 f"{o['median_ms']:.4f}" if o.get("median_ms") else "-",
                 f"{o['device_held_s']:.2f}" if o.get("device_held_s") else "-"]
        lines.append("| " + " | ".join(cells) + " |")
    held_kb = [r["kernelbench"]["process_s"] for r in rows if r["kernelbench"].get("process_s")]
    held_ours = [r["ours"]["device_held_s"] for r in rows if (r.get("ours") or {}).get("device_held_s")]
    if held_kb:
        summary = (f"GPU seconds per candidate, median: KernelBench {statistics.median(held_kb):.1f} s "
                   f"(process, {len(held_kb)} candidates)")
        if held_ours:
            summary += f"; ours {statistics.median(held_ours):.2f} s (device held, {len(held_ours)})"
        lines += ["", summary]
    (args.out / "kernelbench_side_by_side.md").write_text("\n".join(lines) + "\n")
    (args.out / "kernelbench_side_by_side.json").write_text(json.dumps(rows, indent=1, default=str))
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
