"""What judging one candidate costs on a device: seconds per stage, device-held seconds, truth checks.

Judges each candidate for real and prints, per candidate, the verdict, the stages the verdict records
(wall seconds), the seconds the device was held (child start to end: on a GPU worker that is the GPU
time the candidate cost, since one candidate at a time runs on a device), the timing scheme's calls and
the fp64 truths the parent computed. The first run on a device also measures the baselines (cached
afterwards); `--warm` judges the first candidate once beforehand so that cost is not counted.

    python scripts/measure_judge_cost.py --device cuda:0 --warm tests/corpus/cuda/kl_div_fast.py ...
    python scripts/measure_judge_cost.py --device cpu --warm            # the CPU corpus's honest kernels
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from sandbox import JudgeConfig, Verdict, execute, prepare  # noqa: E402

CPU_DEFAULT = ["tests/corpus/cpu/kl_div_cpp_correct.py", "tests/corpus/cpu/cross_entropy_cpp_correct.py"]
CUDA_DEFAULT = ["tests/corpus/cuda/kl_div_fast.py", "tests/corpus/cuda/kl_div_naive.py",
                "tests/corpus/cuda/cross_entropy_fast.py", "tests/corpus/cuda/cross_entropy_naive.py"]
DEVICE_STAGES = ("start", "calibration", "load", "correctness", "timing", "extra_shapes")
"""The stages that run while the device is held (compile and baselines do not, once cached)."""


def judge_once(path: Path, device: str, config: JudgeConfig) -> Verdict:
    text = path.read_text()
    task = re.search(r"^task:\s*(\S+)", text, re.MULTILINE).group(1)
    target = "cpu" if device == "cpu" else "cuda"
    prepared = prepare(task, text, target=target, config=config)
    return prepared if isinstance(prepared, Verdict) else execute(prepared, device, config=config)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("candidates", nargs="*", type=Path)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--warm", action="store_true", help="judge the first candidate once, uncounted")
    parser.add_argument("--json", type=Path, help="also write every row as JSON here")
    parser.add_argument("--build-root", type=Path, default=Path(tempfile.gettempdir()) / "measure-judge-cost")
    args = parser.parse_args()
    cuda = args.device.startswith("cuda")
    paths = args.candidates or [ROOT / p for p in (CUDA_DEFAULT if cuda else CPU_DEFAULT)]
    config = JudgeConfig(build_root=args.build_root / "builds", cache_root=args.build_root / "cache")
    if args.warm:
        judge_once(paths[0], args.device, config)
    rows = []
    print(f"{'candidate':<32} {'status':<16} {'held s':>7} " + " ".join(f"{s[:11]:>11}" for s in DEVICE_STAGES)
          + f" {'calls':>5} {'truths':>6} {'parent cpu s':>12}")
    for path in paths:
        v = judge_once(path, args.device, config)
        timing, cost = v.details.get("timing", {}), v.details.get("cost", {})
        row = {"candidate": path.name, "status": v.status.value, "device_held_s": cost.get("device_held_s"),
               "stages": {s: v.stages.get(s) for s in DEVICE_STAGES},
               "timed_calls": (timing.get("timed_calls") or 0) + (timing.get("warmup_calls") or 0),
               "truth_checks": cost.get("truth_checks"), "parent_cpu_s": sum((cost.get("parent_cpu_s") or {}).values()),
               "median_ms": v.performance.candidate.median_ms if v.performance else None}
        rows.append(row)
        stages = " ".join(f"{row['stages'][s]:>11.3f}" if row["stages"][s] is not None else f"{'-':>11}"
                          for s in DEVICE_STAGES)
        print(f"{path.name:<32} {v.status.value:<16} {row['device_held_s'] or 0:>7.2f} {stages} "
              f"{row['timed_calls']:>5} {row['truth_checks'] or 0:>6} {row['parent_cpu_s']:>12.2f}", flush=True)
    held = [r["device_held_s"] for r in rows if r["device_held_s"] is not None and r["status"] == "correct"]
    if held:
        print(f"device-held seconds per correct candidate: median {statistics.median(held):.2f}, max {max(held):.2f}")
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
