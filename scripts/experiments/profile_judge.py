"""Where a candidate's device time goes: the parent's costs per message, the reference's costs, start-up.

Prints three tables, to decide what to make faster before making anything faster:

1. reference costs on the device: make_inputs, fp64 ground_truth and fingerprint per task and distribution
   (synchronised wall ms, median of 3) -- what the parent and the child pay per checked call;
2. start-up: a bare `import torch` and a first CUDA tensor in a fresh interpreter (no sandbox), to set
   against the verdict's `start` stage (which adds the sandbox and the child's own set-up);
3. one real `execute` of each candidate, with every request to the child timed by message kind (count,
   total and median ms round trip) and the parent's top functions by cumulative time.

    python scripts/experiments/profile_judge.py --device cuda:0 tests/corpus/cuda/kl_div_fast.py
"""

from __future__ import annotations

import argparse
import cProfile
import io
import pstats
import re
import statistics
import subprocess
import sys
import time
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path

import torch

from reference import all_tasks
from sandbox import JudgeConfig, Verdict, execute, prepare
from sandbox.shared.compare import fingerprint
from sandbox.supervisor import ChildSession


def synced_ms(fn: Callable[[], object], device: torch.device) -> float:
    times = []
    for _ in range(3):
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        t0 = time.perf_counter()
        fn()
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        times.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(times)


def reference_costs(device: torch.device) -> None:
    print(f"\n## reference costs on {device} (ms, median of 3)\n")
    print(f"{'task':<16} {'distribution':<16} {'make_inputs':>11} {'truth':>8} {'fingerprint':>11}")
    for task in all_tasks():
        shape = task.official_shape if device.type == "cuda" else task.cpu_shape
        for dist in dict.fromkeys((*task.distributions, *task.timed_distributions())):
            made = synced_ms(lambda: task.make_inputs(shape, dist, 1234, device), device)
            made_inputs = task.make_inputs(shape, dist, 1234, device)
            truth = synced_ms(lambda: task.ground_truth(made_inputs), device)  # noqa: B023 - called at once
            prints = synced_ms(lambda: fingerprint(made_inputs), device)  # noqa: B023 - called at once
            print(f"{task.id.value:<16} {dist:<16} {made:>11.2f} {truth:>8.2f} {prints:>11.2f}", flush=True)


def startup(device: torch.device) -> None:
    print("\n## start-up of a fresh interpreter, no sandbox (s)\n")
    probes = {"import torch": "import torch"}
    if device.type == "cuda":
        probes["+ first CUDA tensor"] = f"import torch; torch.zeros(1, device='{device}')"
    for name, code in probes.items():
        walls = []
        for _ in range(3):
            t0 = time.perf_counter()
            subprocess.run([sys.executable, "-c", code], check=True)
            walls.append(time.perf_counter() - t0)
        print(f"{name:<24} {statistics.median(walls):.2f} s (runs: {', '.join(f'{w:.2f}' for w in walls)})")


def profile_execute(path: Path, device: str, config: JudgeConfig) -> None:
    text = path.read_text()
    task = re.search(r"^task:\s*(\S+)", text, re.MULTILINE).group(1)
    prepared = prepare(task, text, target="cuda" if device.startswith("cuda") else "cpu", config=config)
    if isinstance(prepared, Verdict):
        print(f"{path.name}: {prepared.status.value}: {prepared.diagnosis[:200]}")
        return
    rounds: dict[str, list[float]] = defaultdict(list)
    original = ChildSession.request

    def timed_request(self, command, timeout_s):  # noqa: ANN001 - a thin wrapper for measuring
        t0 = time.perf_counter()
        try:
            return original(self, command, timeout_s)
        finally:
            rounds[command.get("op", "?")].append((time.perf_counter() - t0) * 1e3)

    ChildSession.request = timed_request
    profiler = cProfile.Profile()
    try:
        profiler.enable()
        verdict = execute(prepared, device, config=config)
        profiler.disable()
    finally:
        ChildSession.request = original
    print(f"\n## execute {path.name}: {verdict.status.value}: {verdict.diagnosis[:160]}")
    print("stages s: " + ", ".join(f"{k} {v:.2f}" for k, v in verdict.stages.items()))
    print(f"\n{'request':<12} {'count':>6} {'total s':>8} {'median ms':>10} {'max ms':>8}")
    for op, times in sorted(rounds.items(), key=lambda kv: -sum(kv[1])):
        print(f"{op:<12} {len(times):>6} {sum(times) / 1e3:>8.2f} {statistics.median(times):>10.2f} {max(times):>8.2f}")
    out = io.StringIO()
    pstats.Stats(profiler, stream=out).sort_stats("cumulative").print_stats(30)
    print(out.getvalue())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("candidates", nargs="*", type=Path)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--skip-reference", action="store_true")
    args = parser.parse_args()
    device = torch.device(args.device)
    if not args.skip_reference:
        reference_costs(device)
        startup(device)
    config = JudgeConfig(check_extra_shapes=False)
    for path in args.candidates:
        profile_execute(path, args.device, config)


if __name__ == "__main__":
    main()
