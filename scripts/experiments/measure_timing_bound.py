"""Measure how tight the parent's clock bounds an honest candidate's claimed time, idle and under CPU load.

For each honest candidate, judged for real (isolated child, fresh seed per timed call), this prints:

- claim: the child's median per-call time (what the verdict reports);
- run: the median CPU time the kernel accounted to the sandbox during a batch's round trip (`go` ->
  reply), per call; empty: the same for an empty batch, measured before the candidate is loaded;
- ratio: claim / (run - empty), 1.0 when the claim is exactly the CPU work of the call; the rule
  (`plausibility.timing_bound`) flags a median claim below MIN_CLAIM_FRACTION x (run - empty - noise);
- window: the median wall time of the round trips, to show what waiting for a CPU adds under load;
- in brackets, each reading of the rule itself during the judging (a training file's step, then its forward
  alone): the median claim over `call_floor_ms`, against the fraction it must reach.

With `--load N` the same judging runs while N pure-Python busy loops saturate the CPUs (each bounded by
`timeout`), the situation of a worker whose compile pool is busy while a GPU job is timed.

    python scripts/experiments/measure_timing_bound.py --device cpu --load 0 --load 3
    python scripts/experiments/measure_timing_bound.py --device cuda:0 --load 0 --load 16 \
        tests/corpus/cuda/kl_div_fast.py
"""

from __future__ import annotations

import argparse
import os
import re
import signal
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from sandbox import JudgeConfig, judge
from sandbox.execution import plausibility
from sandbox.execution.plausibility import MIN_CLAIM_FRACTION, MIN_CLAIM_FRACTION_TRAINING, RUN_NOISE_MS

ROOT = Path(__file__).resolve().parents[2]

CPU_DEFAULT = ["tests/corpus/cpu/kl_div_cpp_correct.py", "tests/corpus/cpu/cross_entropy_cpp_correct.py",
               "tests/corpus/hostile/cpu/control_cpp_log_then_reduce.py"]
CUDA_DEFAULT = ["tests/corpus/cuda/kl_div_fast.py", "tests/corpus/cuda/kl_div_naive.py",
                "tests/corpus/cuda/cross_entropy_fast.py"]


def busy(n: int) -> list[subprocess.Popen]:
    """N busy loops, each bounded by `timeout` and in a session of its own, so that stopping one stops the loop too
    (a SIGKILL to `timeout` alone left its loop running into the next load level)."""
    return [subprocess.Popen(["timeout", "1800", sys.executable, "-c", "while True: pass"], start_new_session=True)
            for _ in range(n)]


def rule_margins(seen: list[tuple[bool, float, float, str]]) -> str:
    """Each reading of `plausibility.timing_bound` during one judging: the median claim over the rule's floor
    (`call_floor_ms`, noise included), against the fraction it must reach; a training variant's step and its
    forward alone are read by the training fraction."""
    return "; ".join(f"{'training' if training else 'forward'} {claim / floor if floor else float('inf'):.3f} "
                     f"(>= {(MIN_CLAIM_FRACTION_TRAINING if training else MIN_CLAIM_FRACTION)[kind]})"
                     for training, claim, floor, kind in seen)


def measure(path: Path, device: str, config: JudgeConfig) -> dict:
    task = re.search(r"^task:\s*(\S+)", path.read_text(), re.MULTILINE).group(1)
    seen: list[tuple[bool, float, float, str]] = []
    rule = plausibility.timing_bound

    def recorded(claims_ms, windows_ms, runs_ms, empty_runs_ms, device_type="cpu", *, training=False):
        seen.append((training, statistics.median(claims_ms), plausibility.call_floor_ms(runs_ms, empty_runs_ms),
                     "cuda" if device_type == "cuda" else "cpu"))
        return rule(claims_ms, windows_ms, runs_ms, empty_runs_ms, device_type, training=training)

    # The step's and the forward alone's readings too (sandbox/execution/training.py reads the module's function).
    plausibility.timing_bound = recorded
    try:
        verdict = judge(task, path.read_text(), device, config=config)
    finally:
        plausibility.timing_bound = rule
    timing = verdict.details.get("timing") or {}
    if not timing.get("claims_ms"):
        return {"name": path.name, "status": verdict.status.value, "diagnosis": verdict.diagnosis[:200],
                "margins": rule_margins(seen)}
    claim = statistics.median(timing.get("batch_claims_ms") or timing["claims_ms"])  # per call, batch means
    run, empty = statistics.median(timing["runs_ms"]), timing["empty_call_run_ms"]
    return {
        "name": path.name, "status": verdict.status.value, "claim": claim, "run": run, "empty": empty,
        "ratio": claim / max(run - empty, 1e-9), "window": timing["window_median_ms"],
        "load_average": os.getloadavg()[0], "margins": rule_margins(seen),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("candidates", nargs="*", type=Path)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--load", type=int, action="append", help="busy loops to run (repeatable); default 0")
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument("--build-root", type=Path, default=Path(tempfile.gettempdir()) / "measure-timing-bound")
    args = parser.parse_args()
    paths = args.candidates or [ROOT / p for p in (CUDA_DEFAULT if args.device.startswith("cuda") else CPU_DEFAULT)]
    config = JudgeConfig(build_root=args.build_root / "builds", cache_root=args.build_root / "cache",
                         check_extra_shapes=False, **({"timing_budget_ms": 300.0} if args.device == "cpu" else {}))
    fraction = MIN_CLAIM_FRACTION["cuda" if args.device.startswith("cuda") else "cpu"]
    print(f"rule: median claim >= {fraction} x (run - empty - {RUN_NOISE_MS} ms)")
    print(f"{'load':>4} {'candidate':<36} {'status':<16} {'claim ms':>9} {'run ms':>8} {'empty':>7} {'ratio':>6} "
          f"{'window ms':>9} {'loadavg':>7}")
    for load in args.load or [0]:
        procs = busy(load)
        try:
            for _ in range(args.repeat):
                for path in paths:
                    r = measure(path, args.device, config)
                    if "claim" not in r:
                        print(f"{load:>4} {r['name']:<36} {r['status']:<16} {r['diagnosis']} [{r['margins']}]")
                        continue
                    print(f"{load:>4} {r['name']:<36} {r['status']:<16} {r['claim']:>9.4f} {r['run']:>8.4f} "
                          f"{r['empty']:>7.4f} {r['ratio']:>6.3f} {r['window']:>9.4f} {r['load_average']:>7.2f} "
                          f"[{r['margins']}]",
                          flush=True)
        finally:
            for proc in procs:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()


if __name__ == "__main__":
    main()
