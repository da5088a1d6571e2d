"""What a pre-started child's start and end cost, and whether they disturb a kernel being timed beside them.

Issue 12: a spare's device set-up (`Begin` to `Ready`, 4-8 s on an H100) is kept out of every candidate's
timed phases by `sandbox.execution.warm.DeviceGate`, and a candidate's child is closed inside its device hold (~1 s).
Both cost throughput. This script measures what would be gained by moving them, and what it would perturb:

- a victim process times a 1 GiB device-to-device copy with CUDA events and an L2 flush, back to back, for
  the whole run, stamping each call with the host's monotonic clock;
- meanwhile, one after another: real spares from `sandbox.execution.warm.WarmPool` (sandboxed, as the worker starts
  them; their `setup_s` says what the device phase is made of), with the device context created inside the
  gate and then at start (`JudgeConfig.spare_context_at_start`), each then ended by a `close` (the child's
  `exit`) or by a kill and reap (timed); bare CUDA context creations, one at a time and three at once;
- every victim sample is classed by what ran beside it (idle, spare host phase, spare device phase,
  calibration, close, kill, bare contexts), and the classes' medians and tails are printed.

    source scripts/gpu/device_env.sh
    python3 scripts/experiments/measure_spare_overlap.py --device cuda:0 --json OUT.json
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

VICTIM = r"""
import os, sys, time, torch
device, stop = sys.argv[1], sys.argv[2]
torch.cuda.set_device(device)
x = torch.rand(1 << 28, device=device); y = torch.empty_like(x)
flush = torch.empty(1 << 26, dtype=torch.int32, device=device)
start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
while not os.path.exists(stop):
    flush.zero_(); torch.cuda.synchronize()
    t = time.monotonic(); start.record(); y.copy_(x); end.record(); torch.cuda.synchronize()
    print(f"{t:.6f} {start.elapsed_time(end):.5f}", flush=True)
"""
CONTEXT = "import time, torch; t = time.monotonic(); torch.zeros(1, device='{device}').add_(1); " \
          "torch.cuda.synchronize(); print(time.monotonic() - t)"


def summary(values: list[float]) -> dict[str, float]:
    ordered = sorted(values)
    pick = lambda q: ordered[min(len(ordered) - 1, int(q * len(ordered)))]  # noqa: E731
    return {"n": len(ordered), "median": statistics.median(ordered), "p95": pick(0.95), "p99": pick(0.99),
            "max": ordered[-1]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default="cuda:0")
    parser.add_argument("--spares", type=int, default=4, help="spares started and ended per task and mode")
    parser.add_argument("--tasks", nargs="+", default=["kl_div", "kl_div_train"])
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()

    from sandbox.config import JudgeConfig
    from sandbox.execution.warm import WarmPool

    windows: list[tuple[str, float, float]] = []
    stop = Path(tempfile.mkdtemp()) / "stop"
    # Its samples go to a file: a pipe read only at the end filled after ~3,600 lines and stalled it.
    samples_path = stop.with_name("victim.txt")
    with open(samples_path, "w") as sink:
        victim = subprocess.Popen([sys.executable, "-c", VICTIM, args.device, str(stop)], stdout=sink, text=True)
    time.sleep(8)  # the victim's own start; the idle window follows
    mark = time.monotonic()
    time.sleep(4)
    windows.append(("idle", mark, time.monotonic()))
    spares = []
    for task, at_start in [(task, at_start) for at_start in (False, True) for task in args.tasks]:
        config = JudgeConfig(build_root=Path(tempfile.mkdtemp()) / "builds", spare_context_at_start=at_start)
        mode = " (context at start)" if at_start else ""
        # spares=1: the next spare starts as one is taken; each is ended one way or the other after 2 s.
        with WarmPool([args.device], config, spares=1, task_id=task) as pool:
            for i in range(args.spares):
                child = pool.acquire(args.device, task)
                assert child is not None, pool.stats()
                begin = child.began_at  # after its standby and gate waits
                windows += [("spare host phase" + mode, child.spawned, child.spawned + child.host_s),
                            ("spare device phase" + mode, begin, begin + child.device_s),
                            ("calibration", begin + child.device_s, begin + child.device_s + child.calibration_s)]
                time.sleep(2)
                session = child.hand_over(60)
                t = time.monotonic()
                if i % 2 == 0:
                    session.close()
                    kind = "close"
                else:
                    session.kill()
                    session.close(timeout_s=10)
                    kind = "kill"
                windows.append((kind, t, time.monotonic()))
                spares.append({"task": task, "context_at_start": at_start, "host_s": child.host_s,
                               "device_s": child.device_s,
                               "setup_s": child.setup_s, "calibration_s": child.calibration_s,
                               "end": kind, "end_s": time.monotonic() - t})
                time.sleep(1)
    time.sleep(3)
    contexts = []
    for parallel in (1, 1, 3):
        t = time.monotonic()
        procs = [subprocess.Popen([sys.executable, "-c", CONTEXT.format(device=args.device)], stdout=subprocess.PIPE,
                                  text=True) for _ in range(parallel)]
        outs = [float(p.communicate()[0].strip().splitlines()[-1]) for p in procs]
        windows.append((f"bare contexts x{parallel}", t, time.monotonic()))
        contexts.append({"parallel": parallel, "context_s": outs, "wall_s": time.monotonic() - t})
        time.sleep(2)
    # What four starters' CPU-only starts do on the host (no sandbox: the imports alone), all at once.
    t = time.monotonic()
    imports = [subprocess.Popen([sys.executable, "-c", "import torch, torch._dynamo"]) for _ in range(4)]
    for proc in imports:
        proc.wait()
    windows.append(("4 imports of torch + torch._dynamo", t, time.monotonic()))
    time.sleep(2)
    mark = time.monotonic()
    time.sleep(4)
    windows.append(("idle", mark, time.monotonic()))
    stop.touch()
    victim.wait()
    samples = [tuple(map(float, line.split())) for line in samples_path.read_text().splitlines() if line.strip()]

    classes: dict[str, list[float]] = {}
    for t, ms in samples:
        beside = [name for name, a, b in windows if a <= t <= b] or ["(unclassed)"]
        for name in beside:
            classes.setdefault(name, []).append(ms)
    idle = statistics.median(classes.get("idle", [float("nan")]))
    print(f"victim: 1 GiB copy, events + L2 flush; idle median {idle:.4f} ms\n")
    print("| beside the victim | calls | median ms | vs idle | p95 | p99 | max |\n|---|---|---|---|---|---|---|")
    table = {}
    for name, values in sorted(classes.items()):
        s = summary(values)
        table[name] = s
        print(f"| {name} | {s['n']} | {s['median']:.4f} | {100 * (s['median'] / idle - 1):+.2f}% | {s['p95']:.4f} | "
              f"{s['p99']:.4f} | {s['max']:.4f} |")
    print("\nspares (s):")
    for s in spares:
        where = "at start" if s["context_at_start"] else "in gate"
        print(f"  {s['task']:<14} {where:<8} host {s['host_s']:.2f} device {s['device_s']:.2f} "
              f"({', '.join(f'{k} {v:.2f}' for k, v in s['setup_s'].items())}) calibration {s['calibration_s']:.2f} "
              f"{s['end']} {s['end_s']:.2f}")
    print("bare contexts:", json.dumps(contexts))
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps({"device": args.device, "idle_median_ms": idle, "classes": table,
                                         "spares": spares, "contexts": contexts, "windows": windows,
                                         "host": os.uname().nodename}, indent=1))


if __name__ == "__main__":
    main()
