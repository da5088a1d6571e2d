"""Where a spare's CPU-only start goes: the step that caps how many candidates one GPU judges an hour.

Issue 12: on the H100 host (2026-11-25) a spare took 10.2-11.3 s from spawn to `Started` (bubblewrap, the
interpreter, `import torch`, `torch._dynamo`, the judge's modules), three of them at once, so a spare came
every ~3.5 s; on the 2-core development machine the same imports take ~2 s outside the sandbox. This script
splits that figure:

- bytecode caches: for each package the child imports, the share of its modules with a cached `.pyc` that
  the child can read (the child runs with `-B` under a read-only root, so a missing cache is compiled from
  source on every start and never written);
- the same imports outside the sandbox, and bare `python -c pass` / `import torch` inside it (what the
  sandbox itself adds);
- real spares (`sandbox.supervisor.ChildSession`, pre-started, as `sandbox.execution.warm.WarmPool` starts them) from
  spawn to `Started`: one at a time, then 3 and 6 at once (contention between starts);
- one spare's start under `PYTHONPROFILEIMPORTTIME`: the slowest imports, by cumulative and by own time.

    source scripts/gpu/device_env.sh
    python3 scripts/experiments/measure_spare_start.py --device cuda:0 --json OUT.json
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import replace
from pathlib import Path

from sandbox import isolation, sandboxed_process
from sandbox import protocol as msg
from sandbox.execution import bytecode
from sandbox.config import JudgeConfig
from sandbox.supervisor import ChildPaths, ChildSession, child_env, code_binds

ROOT = Path(__file__).resolve().parents[2]

CHILD_IMPORTS = ("import sandbox.child.harness, sandbox.child.training, importlib; "
                 "importlib.import_module('torch._dynamo')")
PACKAGES = ("torch", "pydantic", "pydantic_core", "numpy", "sympy", "sandbox", "reference")


def bytecode_coverage(package: str) -> dict[str, object]:
    """Share of the package's modules with a cached .pyc next to them (what `-B` can still read)."""
    found = bytecode.coverage(package)
    if found is None:
        return {"package": package, "found": False}
    return {"package": package, "root": str(found.root), "modules": found.modules, "cached": found.cached,
            "share": round(found.share, 3)}


def timed_run(argv: list[str], env: dict[str, str]) -> float:
    started = time.monotonic()
    subprocess.run(argv, env=env, check=True, capture_output=True)
    return time.monotonic() - started


def sandboxed(code: str, config: JudgeConfig, gpu: bool) -> float:
    """`python -B -c code` in the child's sandbox (its binds and environment), spawn to exit."""
    with tempfile.TemporaryDirectory(prefix="spare-start-") as work:
        mechanism = isolation.available_mechanism(config.isolation)
        paths = ChildPaths.for_mechanism(mechanism, Path(work))
        spec = isolation.SandboxSpec(argv=[sys.executable, "-B", "-c", code], env=child_env(config, paths),
                                     writable_dir=Path(work), readonly_binds=code_binds(), gpu=gpu,
                                     limits=isolation.Limits(120, config.memory_limit_bytes, config.max_pids,
                                                             1 << 20, 1 << 30, 1 << 30),
                                     cwd=paths.build)
        started = time.monotonic()
        done = sandboxed_process.run(spec, mechanism)
        elapsed = time.monotonic() - started
        if done.returncode != 0:
            raise RuntimeError(f"sandboxed {code!r} failed ({done.returncode}): {done.output_text()[-2000:]}")
        return elapsed


def spare_starts(count: int, device: str, config: JudgeConfig, extra_env: dict[str, str] | None = None
                 ) -> tuple[list[float], list[str]]:
    """`count` spares spawned at once; each one's spawn-to-`Started` seconds, and their stderr."""
    results: list[float] = [0.0] * count
    errors: list[str] = [""] * count
    gpu = device.startswith("cuda")

    def one(i: int) -> None:
        with tempfile.TemporaryDirectory(prefix="spare-start-") as work:
            spawned = time.monotonic()
            session = ChildSession("execute", None, device, Path(work), config, gpu=gpu, pre_started=True,
                                   wall_s=300, extra_env=extra_env)
            try:
                reply = session.receive(240)
                parsed = msg.parse_reply(reply.header, msg.Started)
                if not isinstance(parsed, msg.Started) or not parsed.ok:
                    raise RuntimeError(f"spare answered {reply.header}")
                results[i] = time.monotonic() - spawned
            finally:
                session.kill()
                session.close(timeout_s=5)
                errors[i] = session.stderr()

    threads = [threading.Thread(target=one, args=(i,)) for i in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return results, errors


def import_profile(stderr: str, top: int) -> dict[str, list[tuple[str, float, float]]]:
    """`PYTHONPROFILEIMPORTTIME` lines -> the slowest imports by cumulative and by own seconds."""
    rows = []
    for line in stderr.splitlines():
        if not line.startswith("import time:") or "self [us]" in line:
            continue
        _, self_us, cumulative_us, name = (part.strip() for part in line.replace("import time:", "|").split("|"))
        rows.append((name, int(self_us) / 1e6, int(cumulative_us) / 1e6))
    by_cumulative = sorted(rows, key=lambda r: -r[2])[:top]
    by_self = sorted(rows, key=lambda r: -r[1])[:top]
    return {"by_cumulative": by_cumulative, "by_self": by_self,
            "total_s": [round(sum(r[1] for r in rows), 3)]}  # type: ignore[dict-item]


def describe(values: list[float]) -> str:
    return (f"median {statistics.median(values):.2f} s, min {min(values):.2f}, max {max(values):.2f} "
            f"(n={len(values)})")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--alone", type=int, default=3, help="spares started one at a time")
    parser.add_argument("--together", type=int, nargs="*", default=[3, 6], help="spares started at once")
    parser.add_argument("--top", type=int, default=12)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    config = replace(JudgeConfig(), output_limit_bytes=16 << 20)
    gpu = args.device.startswith("cuda")
    report: dict[str, object] = {"date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "device": args.device,
                                 "cpus": os.cpu_count(), "loadavg": os.getloadavg(),
                                 "mechanism": isolation.available_mechanism(config.isolation)}
    print(f"# spare start, {report['date']}, {args.device}, {report['cpus']} CPUs, isolation {report['mechanism']}")

    report["bytecode"] = [bytecode_coverage(p) for p in PACKAGES]
    print("\n## bytecode caches the child can read (`-B`: never written there)\n")
    for row in report["bytecode"]:  # type: ignore[union-attr]
        print(f"- {row['package']}: {row.get('cached')}/{row.get('modules')} modules cached ({row.get('root')})")

    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), *isolation.extra_python_path(),
                                                        os.environ.get("PYTHONPATH", "")])}
    plain = [timed_run([sys.executable, "-B", "-c", CHILD_IMPORTS], env) for _ in range(args.alone)]
    bare = [sandboxed("pass", config, gpu) for _ in range(args.alone)]
    torch_only = [sandboxed("import torch", config, gpu) for _ in range(args.alone)]
    report.update(plain_imports_s=plain, sandboxed_pass_s=bare, sandboxed_import_torch_s=torch_only)
    print("\n## the pieces\n")
    print(f"- the child's imports, no sandbox: {describe(plain)}")
    print(f"- `python -c pass` in the sandbox: {describe(bare)}")
    print(f"- `import torch` in the sandbox: {describe(torch_only)}")

    print("\n## spares, spawn to `Started`\n")
    alone = [spare_starts(1, args.device, config)[0][0] for _ in range(args.alone)]
    report["spare_alone_s"] = alone
    print(f"- one at a time: {describe(alone)}")
    for count in args.together:
        together, _ = spare_starts(count, args.device, config)
        report[f"spare_{count}_at_once_s"] = together
        print(f"- {count} at once: {describe(together)}")

    (profiled,), (stderr,) = spare_starts(1, args.device, config, {"PYTHONPROFILEIMPORTTIME": "1"})
    profile = import_profile(stderr, args.top)
    report["profiled_start_s"] = profiled
    report["import_profile"] = profile
    print(f"\n## one spare's imports (PYTHONPROFILEIMPORTTIME; that start took {profiled:.2f} s, its imports "
          f"{profile['total_s'][0]:.2f} s of own time)\n")
    print("| by cumulative | s | by own time | s |\n|---|---|---|---|")
    for (name_c, _, cum), (name_s, own, _) in zip(profile["by_cumulative"], profile["by_self"]):
        print(f"| {name_c} | {cum:.3f} | {name_s} | {own:.3f} |")
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(report, indent=1, default=str))


if __name__ == "__main__":
    main()
