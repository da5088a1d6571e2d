"""Profile honest corpus kernels through the judge's profiler (issue 28) and keep what ncu wrote.

    source scripts/gpu/device_env.sh && python3 scripts/gpu/profile_capture.py --out results/profiles [FILES]
    ... --honest: every forward file of tests/corpus/cuda that declares `expect: correct`

For the files named (by default tests/corpus/cuda/kl_div_fast.py and cross_entropy_fast.py; the task is the
file's `task:` line): build each as the judge does (sandbox.pipeline
.prepare, CUDA target), profile it with sandbox.profiling.run.profile_candidate (ncu wrapping the candidate's own
bubblewrap child, official inputs, 3 calls after a warm-up), and write under --out:

- `kl_div_fast_h100.csv`, `cross_entropy_fast_h100.csv`: ncu's raw log as the judge read it. Copy them over
  tests/fixtures/ncu/ (same names) to replace the hand-written fixtures with recordings;
- `profiles.json`: each parsed Profile (status, reason, ncu version, kernels) and the rendered prompt text;
- `profiles.md`: the per-kernel table for docs/benchmarks.md, and each prompt text with its length.

`--judged`: judge each file first and profile it under the wall limit its verdict gives
(`sandbox.profiling.run.time_limit_s`, as the service's profile of a judged submission does), with the limit and
the profile's device seconds in the table: a limit that cuts an honest profile shows as its reason.

The exit status is 1 when a profile is not "ok" (its reason is in both files): e.g. "the GPU's performance
counters are reserved for administrators", which says the sandboxed child may not read them on this host.
`--ncu PATH` names the profiler when it is not on PATH or in CUDA's usual places.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

from sandbox.config import JudgeConfig
from sandbox.pipeline import PreparedCandidate, execute, prepare
from sandbox.profiling.render import render_text
from sandbox.profiling.report import Profile
from sandbox.profiling.run import TIME_LIMIT_S, profile_candidate, time_limit_s

REPO = Path(__file__).resolve().parents[2]
DEFAULT_FILES = ("tests/corpus/cuda/kl_div_fast.py", "tests/corpus/cuda/cross_entropy_fast.py")
FORWARD_TASKS = ("kl_div", "cross_entropy")
"""The profiled child runs the forward call on official inputs; the training variants' step is not profiled."""


def declared(path: Path, field: str) -> str | None:
    match = re.search(rf"^{field}:\s*(\S+)\s*$", path.read_text(), re.M)
    return match.group(1) if match else None


def honest_files() -> list[Path]:
    return [p for p in sorted((REPO / "tests/corpus/cuda").glob("*.py"))
            if declared(p, "expect") == "correct" and declared(p, "task") in FORWARD_TASKS]


def _figure(value: float | None, scale: float = 1.0, digits: int = 1) -> str:
    return "n/a" if value is None else f"{value / scale:.{digits}f}"


def table(name: str, profile: Profile) -> list[str]:
    if profile.status != "ok":
        return [f"| {name} | {profile.status}: {profile.reason} |" + " |" * 9]
    rows = []
    for k in profile.kernels:
        stalls = ", ".join(f"{s.reason} {s.share_pct:.0f}%" for s in k.stalls) or "n/a"
        rows.append(f"| {name} | `{k.name.split('(')[0]}` x{k.launches} | {_figure(k.duration_ns, 1e3)} | "
                    f"{_figure(k.dram_bytes_per_s, 1e12, 2)} | {_figure(k.dram_pct_of_peak)} | "
                    f"{_figure(k.sm_pct_of_peak)} | {_figure(k.achieved_occupancy_pct)} | "
                    f"{k.registers_per_thread} | {k.shared_bytes_per_block} | {k.grid} x {k.block} | {stalls} |")
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--device", default="cuda:0")
    parser.add_argument("--ncu", default=None)
    parser.add_argument("--calls", type=int, default=3)
    parser.add_argument("--honest", action="store_true", help="every honest forward file of tests/corpus/cuda")
    parser.add_argument("--judged", action="store_true", help="judge first; profile under the verdict's wall limit")
    parser.add_argument("files", nargs="*", type=Path)
    args = parser.parse_args()
    files = honest_files() if args.honest else [REPO / f for f in (args.files or DEFAULT_FILES)]
    args.out.mkdir(parents=True, exist_ok=True)
    config = JudgeConfig()
    results: dict[str, dict] = {}
    lines = ["| candidate | kernel | time (us) | DRAM (TB/s) | DRAM % of peak | SM % | occupancy % | regs/thread | "
             "smem/block (B) | grid x block | top stalls |", "|" + "---|" * 11]
    texts = []
    limits = ["| candidate | wall limit s | device s under ncu | status |", "|---|---|---|---|"]
    failed = False
    for path in files:
        name, task = path.stem, declared(path, "task")
        prepared = prepare(task, path.read_text(), target="cuda", config=config)
        if not isinstance(prepared, PreparedCandidate):
            profile = Profile(status="failed", reason=f"the build failed: {prepared.status}: {prepared.diagnosis}")
        else:
            limit = TIME_LIMIT_S
            if args.judged:
                limit = time_limit_s(execute(prepared, args.device, config=config), args.calls)
            profile = profile_candidate(prepared, args.device, config=config, ncu=args.ncu, calls=args.calls,
                                        time_limit_s=limit, log_copy=args.out / f"{name}_h100.csv")
            limits.append(f"| {name} | {limit:.1f} | {profile.gpu_seconds:.1f} | {profile.status} |")
        text = render_text(profile)
        failed |= profile.status != "ok"
        results[name] = {"profile": profile.model_dump(mode="json"), "text": text}
        lines += table(name, profile)
        texts += [f"### {name} ({len(text)} characters)", "", "```", text, "```", ""]
        print(f"{name}: {profile.status} {profile.reason or ''} ({profile.gpu_seconds:.1f} s on the device)\n{text}\n",
              flush=True)
    (args.out / "profiles.json").write_text(json.dumps(results, indent=2))
    (args.out / "profiles.md").write_text("\n".join(lines + [""] + limits + [""] + texts))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
