"""The CUDA corpus against the judge's input distributions (issue 25): errors per distribution, times on planted.

Three stages, on a GPU machine, from the repository root after `source scripts/gpu/device_env.sh`:
- `compile`: builds every listed corpus file in its own process, 8 at once (load_inline at import), into
  TORCH_EXTENSIONS_DIR, so that the next stages only load them;
- `errors SEEDS [FILES]`: each file's ModelNew on every distribution of its task at the official shape, the
  worst |output - truth| / (atol + rtol |truth|) over SEEDS seeds (under 1 passes; inf for NaN or inf);
- `timing REPS FILES`: each file's median time (CUDA events, L2 flushed before each call) on official inputs,
  on the planted inputs of before issue 25 (the law kept below for the comparison) and on today's planted
  inputs, interleaved so that drift hits the three alike: whether the timed distribution's values move an
  honest kernel's time.

    python3 scripts/experiments/distribution_checks.py compile
    python3 scripts/experiments/distribution_checks.py errors 2
    python3 scripts/experiments/distribution_checks.py timing 30 kl_div_fast cross_entropy_fast
"""

from __future__ import annotations

import importlib.util
import math
import os
import statistics
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import torch

from reference import get_task
from reference.task import generator, planted_rows

ROOT = Path(__file__).resolve().parents[2]
HONEST = ["kl_div_fast", "kl_div_fast_split", "kl_div_fused", "kl_div_naive", "kl_div_triton", "model_kl_div_dispatch",
          "model_kl_div_repeat_include", "kl_div_train_function", "kl_div_train_fused",
          "cross_entropy_fast", "cross_entropy_fast_split", "cross_entropy_online", "cross_entropy_naive",
          "cross_entropy_triton", "model_cross_entropy_pybind", "cross_entropy_train_function",
          "cross_entropy_train_fused"]
HOSTILE = ["c10_kl_all_targets_few_predictions", "c10_kl_cache_by_targets", "c11_ce_no_max_subtraction",
           "c11_kl_bf16_log", "c11_kl_clamped_log"]


def path_of(name: str) -> Path:
    honest = ROOT / "tests/corpus/cuda" / f"{name}.py"
    return honest if honest.exists() else ROOT / "tests/corpus/hostile/cuda" / f"{name}.py"


def task_of(name: str) -> str:
    text = path_of(name).read_text()
    line = next(row for row in text.splitlines() if row.startswith("task:"))
    return line.split(":", 1)[1].strip().removesuffix("_train")


def load(name: str) -> object:
    spec = importlib.util.spec_from_file_location(name, path_of(name))
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def compile_all() -> None:
    def one(name: str) -> str:
        r = subprocess.run([sys.executable, __file__, "load", name], capture_output=True, text=True)
        return f"{name}: rc {r.returncode} {r.stderr[-1500:] if r.returncode else ''}"
    with ThreadPoolExecutor(8) as pool:
        for line in pool.map(one, HONEST + HOSTILE):
            print(line, flush=True)


def errors(names: list[str], seeds: int) -> None:
    device = torch.device("cuda")
    for name in names:
        task = get_task(task_of(name))
        try:
            model = load(name).ModelNew().to(device)
        except Exception as exc:  # noqa: BLE001 - a file that does not build is reported, the others still run
            print(f"| {name} | load failed: {exc!r} |", flush=True)
            continue
        cells = []
        for distribution in task.distributions:
            worst = 0.0
            for seed in range(seeds):
                inputs = task.make_inputs(task.official_shape, distribution, 1000 + seed, device)
                truth = float(task.ground_truth(inputs))
                with torch.no_grad():
                    out = float(model(*inputs))
                tol = task.tolerance.atol + task.tolerance.rtol * abs(truth)
                ratio = abs(out - truth) / tol if math.isfinite(out) else math.inf
                worst = max(worst, ratio)
                del inputs
            cells.append(f"{distribution} {worst:.3g}")
        print(f"| {name} | " + " | ".join(cells) + " |", flush=True)


def _old_kl_planted(rows, cols, g, device):
    """kl_div's planted law before issue 25: official draws, the loss hidden in cells the targets revealed."""
    draw = dict(generator=g, device=device)
    scale = torch.rand((), **draw)
    logit_p = torch.rand(rows, cols, **draw).mul_(scale)
    logit_t = torch.rand(rows, cols, **draw)
    picked, n = planted_rows(rows, 1024, 128, g, device)
    column = torch.randint(0, cols, (n,), **draw)
    depth = torch.rand(n, **draw).mul_(40.0).add_(10.0)
    bump = torch.rand(n, **draw).mul_(7.0).add_(-4.0 + math.log(cols))
    logit_p[picked, column] -= depth
    logit_t[picked, column] += bump
    return [logit_p.softmax(dim=-1), logit_t.softmax(dim=-1)]


def _old_ce_planted(rows, cols, g, device):
    """cross_entropy's planted law before issue 25 (one generator; today's draws the targets from their own)."""
    draw = dict(generator=g, device=device)
    logits = torch.rand(rows, cols, **draw)
    targets = torch.randint(0, cols, (rows,), **draw)
    picked, n = planted_rows(rows, 1024, 64, g, device)
    column = (targets[picked] + torch.randint(1, max(cols, 2), (n,), **draw)) % cols
    height = torch.rand(n, **draw).mul_(62.0)
    logits[picked, column] = height.add_(-2.0 + math.log(cols * (math.e - 1.0)))
    return [logits, targets]


def timing(names: list[str], reps: int) -> None:
    device = torch.device("cuda")
    flush = torch.empty(64 << 20, dtype=torch.float32, device=device)
    for name in names:
        task = get_task(task_of(name))
        model = load(name).ModelNew().to(device)
        old = _old_kl_planted if task.id.value == "kl_div" else _old_ce_planted
        sources = {
            "official": lambda s: task.make_inputs(task.official_shape, "official", s, device),
            "planted (before)": lambda s: old(*task.official_shape, generator(s, device), device),
            "planted (now)": lambda s: task.make_inputs(task.official_shape, "planted", s, device),
        }
        times = {k: [] for k in sources}
        for rep in range(reps):
            for label, make in sources.items():  # interleaved, so drift hits every source alike
                inputs = make(rep)
                with torch.no_grad():
                    model(*inputs)
                    flush.zero_()
                    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                    start.record()
                    model(*inputs)
                    end.record()
                torch.cuda.synchronize()
                times[label].append(start.elapsed_time(end))
                del inputs
        base = statistics.median(times["official"])
        print(f"| {name} | " + " | ".join(f"{k} {statistics.median(v):.4f} ms ({statistics.median(v) / base - 1:+.2%})"
                                          for k, v in times.items()) + " |", flush=True)


if __name__ == "__main__":
    os.environ.setdefault("TORCH_EXTENSIONS_DIR", "/tmp/torch_ext_issue25")
    stage = sys.argv[1]
    if stage == "load":
        load(sys.argv[2])
    elif stage == "compile":
        compile_all()
    elif stage == "errors":
        errors(sys.argv[3:] or HONEST + HOSTILE, int(sys.argv[2]))
    elif stage == "timing":
        timing(sys.argv[3:], int(sys.argv[2]))
