"""How one build step's time grows when several run at once: the same compile command, 1, 4, 8, 16 copies.

Why: with 8 builds at once on the H100 host's 16 cores (scripts/bench/bench_build.py), main.cpp and the `.cu` each took
22-25 s whatever main.cpp's header was (the full precompiled torch/extension.h, or its subset that takes half the
time alone). This separates the compiler from the judge: it reruns ninja's own command for one step of a build
that bench_build left behind (`ninja -t commands`, the step's outputs renamed per copy), under the environment the
build child gives it (CPATH for main.cpp's precompiled header, NVCC_APPEND_FLAGS for the slim `.cu` headers), and
prints each copy's wall seconds and the CPU seconds all copies used.

    python3 scripts/experiments/measure_build_scaling.py BUILD_DIR --step main.o --cpath ACCEL/VARIANT/main-subset
    python3 scripts/experiments/measure_build_scaling.py BUILD_DIR --step cuda.cuda.o --slim   # the .cu, slim headers

BUILD_DIR is an extension's build directory (it has build.ninja); `--json FILE` writes every figure.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shlex
import statistics
import subprocess
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from sandbox.child.build.slim_headers import SLIM_DIR  # the slim headers' directory inside a build


def step_command(build_dir: Path, output: str) -> str:
    """ninja's command line for the step that writes `output` (the last line of `ninja -t commands`)."""
    done = subprocess.run(["ninja", "-t", "commands", output], cwd=build_dir, capture_output=True, text=True,
                          check=True)
    return done.stdout.strip().splitlines()[-1]


def run_copies(command: str, output: str, copies: int, env: dict[str, str], cwd: Path) -> dict:
    """Run `copies` instances of the command at once, each writing its own outputs; their wall seconds."""
    scratch = Path(tempfile.mkdtemp(prefix="build-scaling-"))

    def one(index: int) -> float:
        mine = command.replace(output, str(scratch / f"{index}-{output}"))
        started = time.monotonic()
        done = subprocess.run(mine, shell=True, cwd=cwd, env=env, capture_output=True, text=True)
        if done.returncode != 0:
            raise RuntimeError(f"copy {index} failed: {done.stderr[-2000:]}")
        return time.monotonic() - started

    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.monotonic()
    with ThreadPoolExecutor(copies) as pool:
        walls = list(pool.map(one, range(copies)))
    span = time.monotonic() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return {"copies": copies, "p50_s": round(statistics.median(walls), 2), "max_s": round(max(walls), 2),
            "span_s": round(span, 2), "cpu_s_per_copy": round(cpu / copies, 2)}


def pch_report(command: str, output: str, env: dict[str, str], cwd: Path) -> list[str]:
    """What g++ says about the precompiled header it is offered: `-H` marks a used one `!`, a rejected one `x`,
    and -Winvalid-pch says why it was rejected."""
    scratch = Path(tempfile.mkdtemp(prefix="build-scaling-pch-"))
    mine = command.replace(output, str(scratch / output)) + " -H -Winvalid-pch"
    done = subprocess.run(mine, shell=True, cwd=cwd, env=env, capture_output=True, text=True)
    return [line for line in done.stderr.splitlines() if ".gch" in line or "pch" in line.lower()][:20]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("build_dir", type=Path)
    parser.add_argument("--step", default="main.o", help="the output whose command is measured (main.o, cuda.cuda.o)")
    parser.add_argument("--cpath", help="CPATH for the step (the precompiled header's directory)")
    parser.add_argument("--slim", action="store_true", help="point nvcc at the build's slim headers")
    parser.add_argument("--copies", default="1,4,8,16", help="comma-separated numbers of copies at once")
    parser.add_argument("--sandbox-root", default="/build", help="where the build child saw the build")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args(argv)

    # ninja's commands name the build as the sandbox showed it (bubblewrap binds the build at /build)
    command = step_command(args.build_dir, args.step).replace(f"{args.sandbox_root}/", f"{args.build_dir.parents[1]}/")
    env = {k: v for k, v in os.environ.items() if k not in ("CPATH", "NVCC_APPEND_FLAGS")}
    if args.cpath:
        env["CPATH"] = args.cpath
    if args.slim:
        env["NVCC_APPEND_FLAGS"] = f"-I{args.build_dir / SLIM_DIR}"
    print(f"step {args.step} of {args.build_dir} ({os.cpu_count()} CPUs), CPATH={env.get('CPATH', '-')}, "
          f"NVCC_APPEND_FLAGS={env.get('NVCC_APPEND_FLAGS', '-')}\n  {shlex.split(command)[0]} ...", flush=True)
    report = {}
    if args.step == "main.o":
        report["pch"] = pch_report(command, args.step, env, args.build_dir)
        print("  g++ on the precompiled header: " + ("; ".join(report["pch"]) or "none offered or none read"),
              flush=True)
    rows = []
    for copies in (int(c) for c in args.copies.split(",")):
        row = run_copies(command, args.step, copies, env, args.build_dir)
        rows.append(row)
        print(f"  {copies:3d} at once: p50 {row['p50_s']:6.2f} s  max {row['max_s']:6.2f} s  "
              f"span {row['span_s']:6.2f} s  CPU {row['cpu_s_per_copy']:6.2f} s per copy", flush=True)
    if args.json:
        args.json.write_text(json.dumps({"build_dir": str(args.build_dir), "step": args.step, "cpath": args.cpath,
                                         "slim": args.slim, "cpus": os.cpu_count(), "rows": rows, **report},
                                        indent=1))


if __name__ == "__main__":
    main()
