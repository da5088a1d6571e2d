#!/usr/bin/env python3
"""Benchmark the CUDA corpus kernels directly (no sandbox, no judge): error vs fp64 truth, time, % SoL.

Standalone: needs only torch with CUDA and a GPU; uses nothing else from this repository. Run on the GPU
machine from the repository root:

    python scripts/bench/gpu_kernels_bench.py                 # everything, ~3-6 minutes on an H100
    OUT=results python scripts/bench/gpu_kernels_bench.py     # also writes results/gpu_kernels_bench.md
    python scripts/bench/gpu_kernels_bench.py --only fast --no-compile --reps 50

What it does:
1. Picks every `tests/corpus/cuda/*.py` whose docstring says `expect: correct` or `expect: incorrect`
   (compile_error.py, illegal_address.py and hang.py are never loaded: they would poison the CUDA context
   or never return) and builds them all in parallel, each in its own Python subprocess (load_inline,
   TORCH_CUDA_ARCH_LIST=9.0 unless set); this process then imports them from the warm extension cache.
2. Measures the device-to-device copy bandwidth (1 GiB buffer, bytes read + written / time, median of 20).
3. Per task, on the official KernelBench inputs (same distributions as get_inputs, seeded): fp64 truth
   (chunked over rows), relative error and timing of the candidates, of the eager fp32 reference and of
   torch.compile of it. Timing: CUDA events, a 256 MiB buffer zeroed before every rep (L2 flush), 10
   warm-up runs, 100 timed reps, median and quartiles. % SoL = (minimal bytes / bandwidth) / median, for
   the measured copy bandwidth and for the measured read bandwidth (read-only kernels can beat the copy).
   Each candidate is also run twice on the same inputs to see whether it is bitwise deterministic.
4. Every candidate at the task's extra shapes (and with 4-byte-misaligned contiguous inputs), error only.
Prints the tables and writes them as markdown to $OUT/gpu_kernels_bench.md when OUT is set.
Pass = |y - t| <= 1e-6 + 1e-4 |t| against the fp64 truth t (the judge's tolerance for both tasks).
"""

from __future__ import annotations

import argparse
import importlib.util
import math
import os
import re
import statistics
import subprocess
import sys
import time
import traceback
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

os.environ.setdefault("TORCH_CUDA_ARCH_LIST", "9.0")

import torch
import torch.nn.functional as F

ROOT = Path(__file__).resolve().parents[2]
CORPUS = ROOT / "tests" / "corpus" / "cuda"
NEVER_LOAD = {"compile_error.py", "illegal_address.py", "hang.py"}
ATOL, RTOL = 1e-6, 1e-4
T0 = time.time()

TASKS = {
    "kl_div": {"official": (16384, 16384), "extra": [(4096, 16383), (128, 131072), (65536, 1000)],
               "misaligned": (1024, 4099)},
    "cross_entropy": {"official": (32768, 4096), "extra": [(4096, 50257), (65536, 1000), (1000, 4095)],
                      "misaligned": (2048, 4095)},
}


def log(msg: str) -> None:
    print(f"[{time.time() - T0:6.1f}s] {msg}", flush=True)


# ---------------------------------------------------------------- candidates and builds

_HEADER = re.compile(r"^(expect|task):\s*(.+?)\s*$", re.M)


def meta(path: Path) -> dict[str, str]:
    return dict(_HEADER.findall(path.read_text()[:4000]))


def find_candidates(only: list[str]) -> list[tuple[Path, dict[str, str]]]:
    out = []
    for path in sorted(CORPUS.glob("*.py")):
        if path.name in NEVER_LOAD:
            continue
        m = meta(path)
        if m.get("expect") not in ("correct", "incorrect") or m.get("task") not in TASKS:
            continue
        if only and not any(s in path.stem for s in only):
            continue
        out.append((path, m))
    order = {"correct": 0, "incorrect": 1}
    out.sort(key=lambda pm: (list(TASKS).index(pm[1]["task"]), order[pm[1]["expect"]], pm[0].stem))
    return out


_IMPORT = ("import importlib.util, sys\n"
           "spec = importlib.util.spec_from_file_location('cand_build', sys.argv[1])\n"
           "mod = importlib.util.module_from_spec(spec)\n"
           "spec.loader.exec_module(mod)\n")


def build_one(path: Path) -> tuple[str, bool, float, str]:
    """Build (load_inline) one candidate in a subprocess so builds run in parallel and crash alone."""
    t = time.time()
    env = dict(os.environ, MAX_JOBS=os.environ.get("MAX_JOBS", "2"))
    try:
        r = subprocess.run([sys.executable, "-c", _IMPORT, str(path)], capture_output=True, text=True,
                           timeout=480, env=env, cwd=str(ROOT))
        ok = r.returncode == 0
        tail = "" if ok else (r.stderr or r.stdout)[-1500:]
    except subprocess.TimeoutExpired:
        ok, tail = False, "build timed out (480 s)"
    return path.name, ok, time.time() - t, tail


def import_candidate(path: Path):
    spec = importlib.util.spec_from_file_location(f"cand_{path.stem}", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod.ModelNew().cuda().eval()


# ---------------------------------------------------------------- inputs and truth

def make_inputs(task: str, shape: tuple[int, int], seed: int, dev: torch.device, offset: tuple[int, int] = (0, 0)):
    """KernelBench get_inputs distributions; offset puts the tensors at an element offset in a fresh buffer
    (contiguous but not 16-byte aligned)."""
    g = torch.Generator(device=dev)
    g.manual_seed(seed)
    rows, cols = shape
    if task == "kl_div":
        scale = torch.rand((), device=dev, generator=g)
        a = (torch.rand(rows, cols, device=dev, generator=g) * scale).softmax(dim=-1)
        b = torch.rand(rows, cols, device=dev, generator=g).softmax(dim=-1)
    else:
        a = torch.rand(rows, cols, device=dev, generator=g)
        b = torch.randint(0, cols, (rows,), device=dev, generator=g)
    if offset[0]:
        buf = torch.empty(a.numel() + 4, dtype=a.dtype, device=dev)
        a = buf[offset[0]:offset[0] + a.numel()].view(rows, cols).copy_(a)
    if offset[1] and task == "kl_div":
        buf = torch.empty(b.numel() + 4, dtype=b.dtype, device=dev)
        b = buf[offset[1]:offset[1] + b.numel()].view(rows, cols).copy_(b)
    return a, b


@torch.no_grad()
def truth(task: str, a: torch.Tensor, b: torch.Tensor) -> float:
    rows, cols = a.shape
    chunk = max(1, (1 << 25) // cols)
    acc = torch.zeros((), dtype=torch.float64, device=a.device)
    for i in range(0, rows, chunk):
        if task == "kl_div":
            p, t = a[i:i + chunk].double(), b[i:i + chunk].double()
            acc += torch.xlogy(t, t / p).sum()
        else:
            x = a[i:i + chunk].double()
            acc += (torch.logsumexp(x, dim=1) - x.gather(1, b[i:i + chunk, None]).squeeze(1)).sum()
    return float(acc) / rows


def eager(task: str):
    if task == "kl_div":
        return lambda p, t: F.kl_div(torch.log(p), t, reduction="batchmean")
    return lambda x, y: F.cross_entropy(x, y)


def task_bytes(task: str, shape: tuple[int, int]) -> int:
    rows, cols = shape
    return 2 * rows * cols * 4 if task == "kl_div" else rows * cols * 4 + rows * 8


def rel_err(y: float, t: float) -> float:
    if not math.isfinite(y):
        return math.inf
    return abs(y - t) / abs(t) if t != 0 else abs(y - t)


def passes(y: float, t: float) -> bool:
    return math.isfinite(y) and abs(y - t) <= ATOL + RTOL * abs(t)


def run_scalar(fn, args) -> float:
    with torch.no_grad():
        out = fn(*args)
    torch.cuda.synchronize()
    if not isinstance(out, torch.Tensor):
        raise TypeError(f"returned {type(out).__name__}, not a tensor")
    if out.numel() != 1:
        raise ValueError(f"returned shape {tuple(out.shape)}, expected ()")
    return float(out.detach().double().reshape(()).cpu())


# ---------------------------------------------------------------- timing

_FLUSH: torch.Tensor | None = None


def time_fn(fn, args, warmup: int, reps: int) -> tuple[float, float, float]:
    global _FLUSH
    if _FLUSH is None:
        _FLUSH = torch.empty(64 << 20, dtype=torch.float32, device=args[0].device)  # 256 MiB > 50 MB L2
    with torch.no_grad():
        for _ in range(warmup):
            fn(*args)
        torch.cuda.synchronize()
        starts = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
        ends = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
        for i in range(reps):
            _FLUSH.zero_()
            starts[i].record()
            fn(*args)
            ends[i].record()
        torch.cuda.synchronize()
    ms = [s.elapsed_time(e) for s, e in zip(starts, ends)]
    q25, q50, q75 = statistics.quantiles(ms, n=4, method="inclusive")
    return q50, q25, q75


def copy_bandwidth(dev: torch.device) -> float:
    """Device-to-device copy of a 1 GiB buffer: (bytes read + bytes written) / time, median of 20."""
    a = torch.ones(1 << 28, dtype=torch.float32, device=dev)
    b = torch.empty_like(a)
    for _ in range(3):
        b.copy_(a)
    torch.cuda.synchronize()
    ms = []
    for _ in range(20):
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        b.copy_(a)
        e.record()
        e.synchronize()
        ms.append(s.elapsed_time(e))
    del a, b
    torch.cuda.empty_cache()
    return 2 * (1 << 30) / (statistics.median(ms) / 1e3)


def read_bandwidth(dev: torch.device) -> float:
    """torch.sum over a 1 GiB buffer (reads dominate): bytes read / time, median of 20. Streaming kernels
    that only read can beat the copy figure, so % SoL is also given against this one."""
    a = torch.ones(1 << 28, dtype=torch.float32, device=dev)
    ms = []
    for i in range(23):
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        a.sum()
        e.record()
        e.synchronize()
        if i >= 3:
            ms.append(s.elapsed_time(e))
    del a
    torch.cuda.empty_cache()
    return (1 << 30) / (statistics.median(ms) / 1e3)


# ---------------------------------------------------------------- main

def fmt_e(x: float | None) -> str:
    if x is None:
        return "-"
    return "inf/nan" if not math.isfinite(x) else f"{x:.1e}"


def environment(dev: torch.device) -> str:
    lines = [f"GPU: {torch.cuda.get_device_name(dev)}, torch {torch.__version__}, CUDA {torch.version.cuda}, "
             f"python {sys.version.split()[0]}, TORCH_CUDA_ARCH_LIST={os.environ.get('TORCH_CUDA_ARCH_LIST')}"]
    try:
        q = subprocess.run(["nvidia-smi", "--query-gpu=driver_version,clocks.sm,clocks.mem,clocks.max.sm",
                            "--format=csv,noheader"], capture_output=True, text=True, timeout=20).stdout.strip()
        lines.append(f"driver, SM clock, mem clock, max SM clock: {q}")
    except Exception:  # noqa: BLE001
        pass
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--only", nargs="*", default=[], help="substrings of candidate file names to keep")
    ap.add_argument("--warmup", type=int, default=10)
    ap.add_argument("--reps", type=int, default=100)
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--no-compile", action="store_true", help="skip the torch.compile baseline")
    ap.add_argument("--no-extra", action="store_true", help="skip the extra shapes")
    args = ap.parse_args()
    if not torch.cuda.is_available():
        print("needs a CUDA GPU", file=sys.stderr)
        return 2
    dev = torch.device("cuda", torch.cuda.current_device())
    env_text = environment(dev)
    log(env_text.replace("\n", " | "))

    cands = find_candidates(args.only)
    log(f"building {len(cands)} candidates in parallel: {', '.join(p.name for p, _ in cands)}")
    with ThreadPoolExecutor(max_workers=max(1, len(cands))) as pool:
        builds = {name: (ok, secs, tail) for name, ok, secs, tail in pool.map(build_one, [p for p, _ in cands])}
    for name, (ok, secs, tail) in builds.items():
        log(f"  build {name}: {'ok' if ok else 'FAILED'} in {secs:.0f}s" + ("" if ok else "\n" + tail))

    models, errors = {}, {}
    for path, m in cands:
        try:
            models[path.stem] = import_candidate(path)
        except Exception as exc:  # noqa: BLE001
            last = str(exc).strip().splitlines()[-1][:200] if str(exc).strip() else ""
            errors[path.stem] = f"import: {type(exc).__name__}: {last}"
            log(f"  import {path.name} FAILED: {errors[path.stem]}")

    bw = copy_bandwidth(dev)
    rbw = read_bandwidth(dev)
    log(f"D2D copy bandwidth: {bw / 1e12:.3f} TB/s (read + write); read bandwidth (sum): {rbw / 1e12:.3f} TB/s")

    main_rows: list[dict] = []
    extra_rows: list[dict] = []
    for task, spec in TASKS.items():
        task_cands = [(p, m) for p, m in cands if m["task"] == task]
        if not task_cands:
            continue
        shape = spec["official"]
        sol_ms = task_bytes(task, shape) / bw * 1e3
        log(f"== {task} {shape[0]}x{shape[1]}: generating inputs and fp64 truth (SoL {sol_ms:.3f} ms)")
        a, b = make_inputs(task, shape, args.seed, dev)
        t_true = truth(task, a, b)
        log(f"   truth = {t_true:.10g}")

        baselines = [("torch eager (reference)", eager(task))]
        if not args.no_compile:
            baselines.append(("torch.compile (reference)", torch.compile(eager(task))))
        ref_ms: dict[str, float] = {}
        for label, fn in baselines:
            row = {"name": label, "task": task, "expect": "-", "sol_ms": sol_ms}
            try:
                y = run_scalar(fn, (a, b))
                row.update(err=rel_err(y, t_true), ok=passes(y, t_true))
                row["med"], row["q25"], row["q75"] = time_fn(fn, (a, b), args.warmup, args.reps)
                ref_ms["eager" if "eager" in label else "compile"] = row["med"]
            except Exception as exc:  # noqa: BLE001
                row["note"] = f"{type(exc).__name__}: {str(exc).strip()[:160]}"
            log(f"   {label}: err {fmt_e(row.get('err'))}, median {row.get('med', float('nan')):.4f} ms")
            main_rows.append(row)
        for row in main_rows:
            if row["task"] == task:
                row["eager_ms"], row["compile_ms"] = ref_ms.get("eager"), ref_ms.get("compile")

        for path, m in task_cands:
            name = path.stem
            row = {"name": name, "task": task, "expect": m["expect"], "sol_ms": sol_ms,
                   "eager_ms": ref_ms.get("eager"), "compile_ms": ref_ms.get("compile")}
            main_rows.append(row)
            if name not in models:
                row["note"] = errors.get(name, "not built")
                continue
            model = models[name]
            try:
                y1 = run_scalar(model, (a, b))
                y2 = run_scalar(model, (a, b))
                row.update(err=rel_err(y1, t_true), ok=passes(y1, t_true), det=(y1 == y2) or (y1 != y1 and y2 != y2))
                row["med"], row["q25"], row["q75"] = time_fn(model, (a, b), args.warmup, args.reps)
                y3 = run_scalar(model, (a, b))
                if not passes(y3, t_true) and row["ok"]:
                    row["note"] = f"fails after timing (rel err {fmt_e(rel_err(y3, t_true))})"
            except Exception as exc:  # noqa: BLE001
                first = str(exc).strip().splitlines()[0][:160] if str(exc).strip() else ""
                row["note"] = f"{type(exc).__name__}: {first}"
                traceback.print_exc()
            log(f"   {name}: err {fmt_e(row.get('err'))}, median {row.get('med', float('nan')):.4f} ms "
                f"({row.get('note', '')})")
        del a, b
        torch.cuda.empty_cache()

        if args.no_extra:
            continue
        cases = [(f"{r}x{c}", (r, c), (0, 0)) for r, c in spec["extra"]]
        mr, mc = spec["misaligned"]
        if task == "kl_div":
            cases += [(f"{mr}x{mc} p,t @+1 elem", (mr, mc), (1, 1)), (f"{mr}x{mc} p @+1, t @+2", (mr, mc), (1, 2))]
        else:
            cases += [(f"{mr}x{mc} logits @+1 elem", (mr, mc), (1, 0))]
        for label, shp, off in cases:
            a, b = make_inputs(task, shp, args.seed + 1, dev, off)
            t_true = truth(task, a, b)
            for path, m in task_cands:
                name = path.stem
                cell = {"name": name, "task": task, "expect": m["expect"], "case": label}
                if name in models:
                    try:
                        y = run_scalar(models[name], (a, b))
                        cell.update(err=rel_err(y, t_true), ok=passes(y, t_true))
                    except Exception as exc:  # noqa: BLE001
                        cell["note"] = f"{type(exc).__name__}: {str(exc).strip()[:100]}"
                else:
                    cell["note"] = "not built"
                extra_rows.append(cell)
            log(f"   extra {task} {label}: " + ", ".join(
                f"{c['name']} {fmt_e(c.get('err'))}" for c in extra_rows if c["task"] == task and c["case"] == label))
            del a, b
            torch.cuda.empty_cache()

    # ------------------------------------------------------------ tables
    head = ("| kernel | task | expect | rel err (official) | pass | det | median ms | IQR ms | % SoL (copy bw) | "
            "% SoL (read bw) | vs eager | vs compile | match | note |\n|" + "---|" * 14)
    lines = [head]
    for r in main_rows:
        med = r.get("med")
        sol = f"{100 * r['sol_ms'] / med:.1f}%" if med else "-"
        ve = f"{r['eager_ms'] / med:.2f}x" if med and r.get("eager_ms") else "-"
        vc = f"{r['compile_ms'] / med:.2f}x" if med and r.get("compile_ms") else "-"
        iqr = f"{r['q25']:.4f}-{r['q75']:.4f}" if med else "-"
        sol_r = f"{100 * r['sol_ms'] * bw / rbw / med:.1f}%" if med else "-"
        if r["expect"] == "-":
            match = "-"
        else:
            ex_ok = [c.get("ok", False) for c in extra_rows if c["name"] == r["name"]]
            all_ok = bool(r.get("ok")) and all(ex_ok)
            match = "yes" if (all_ok if r["expect"] == "correct" else not all_ok) else "**NO**"
        lines.append(
            f"| {r['name']} | {r['task']} | {r['expect']} | {fmt_e(r.get('err'))} | "
            f"{'-' if 'ok' not in r else ('yes' if r['ok'] else 'no')} | "
            f"{'-' if 'det' not in r else ('yes' if r['det'] else 'no')} | "
            f"{f'{med:.4f}' if med else '-'} | "
            f"{iqr} | {sol} | {sol_r} | {ve} | {vc} | {match} | "
            f"{r.get('note', '').replace('|', '/')} |")
    table = "\n".join(lines)

    extra_table = ""
    if extra_rows:
        cases_by_task: dict[str, list[str]] = {}
        for c in extra_rows:
            cases_by_task.setdefault(c["task"], [])
            if c["case"] not in cases_by_task[c["task"]]:
                cases_by_task[c["task"]].append(c["case"])
        parts = []
        for task, cases in cases_by_task.items():
            parts.append(f"**{task}** extra shapes: relative error vs fp64 (pass at 1e-6 + 1e-4 rel)\n")
            parts.append("| kernel | expect | " + " | ".join(cases) + " |\n|" + "---|" * (2 + len(cases)))
            for name in dict.fromkeys(c["name"] for c in extra_rows if c["task"] == task):
                cells = []
                for case in cases:
                    c = next(c for c in extra_rows if c["name"] == name and c["case"] == case)
                    cells.append(c["note"][:40] if "note" in c else f"{fmt_e(c['err'])} {'ok' if c['ok'] else 'FAIL'}")
                exp = next(c["expect"] for c in extra_rows if c["name"] == name)
                parts.append(f"| {name} | {exp} | " + " | ".join(cells) + " |")
            parts.append("")
        extra_table = "\n".join(parts)

    report = (f"# CUDA corpus kernels: error, time, speed-of-light\n\n{env_text}\n\n"
              f"D2D copy bandwidth {bw / 1e12:.3f} TB/s (read + write, 1 GiB, median of 20); "
              f"read bandwidth {rbw / 1e12:.3f} TB/s (torch.sum of 1 GiB). "
              f"Timing: {args.warmup} warm-up, {args.reps} reps, 256 MiB L2 flush before each, CUDA events. "
              f"% SoL = minimal bytes / bandwidth / median. det = two runs bitwise equal. "
              f"match = official and extra shapes all pass for `correct`, something fails for `incorrect`.\n\n"
              f"{table}\n\n{extra_table}\n"
              f"Builds: " + ", ".join(f"{n} {'ok' if ok else 'FAILED'} {s:.0f}s" for n, (ok, s, _) in builds.items())
              + f"\n\nTotal wall time {time.time() - T0:.0f} s.\n")
    print("\n" + report, flush=True)
    out_dir = os.environ.get("OUT")
    if out_dir:
        Path(out_dir).mkdir(parents=True, exist_ok=True)
        (Path(out_dir) / "gpu_kernels_bench.md").write_text(report)
        log(f"wrote {Path(out_dir) / 'gpu_kernels_bench.md'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
