"""Reference timings (eager and torch.compile) and the device's memory bandwidth, per device model.

Trusted: runs in its own ordinary subprocess (`python -m sandbox.baseline`), never in a process that
imported candidate code, and uses the same `timing` code as the candidate's measurement so speedups
compare like with like. Results are cached per (device model, torch, task, shape, threads) because
torch.compile takes tens of seconds; delete the cache file to refresh.
"""

from __future__ import annotations

import argparse
import fcntl
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Callable

import numpy as np
import torch

from reference import get_task
from sandbox import timing
from sandbox.config import JudgeConfig
from sandbox.environment import device_name

CACHE_FILE = "baselines.json"
BANDWIDTH_BYTES = {"cuda": 1 << 30, "cpu": 256 << 20}
"""Copy size for the bandwidth probe: far beyond any cache, so it measures memory."""

_WATCHED_MAIN = """\
import ctypes, os, runpy, sys
ctypes.CDLL(None, use_errno=True).prctl(1, 9, 0, 0, 0)  # PR_SET_PDEATHSIG = SIGKILL
if os.getppid() != int(sys.argv.pop(1)):
    sys.exit("sandbox.baseline: the worker that started it had already exited")
runpy.run_module("sandbox.baseline", run_name="__main__", alter_sys=True)
"""
"""`python -c _WATCHED_MAIN PARENT_PID ARGS...` is `python -m sandbox.baseline ARGS...` that the kernel SIGKILLs
when the worker (thread) that started it dies, so a killed worker leaves no full-CPU measurement behind.

The child asks for the signal itself, after exec: the worker is multi-threaded, and a `preexec_fn` runs
Python between fork and exec, which deadlocks when another thread holds the import or logging lock
(sandbox/isolation.py). It asks before importing the `sandbox` package (seconds, torch included), so an
orphan does not live through the import; the parent-pid check catches a worker that died before the
request. Done in Python rather than with `setpriv --pdeathsig`, which needs util-linux 2.33 or later,
in a package some distributions ship separately: the interpreter is always there."""


def cache_key(task_id: str, device: str, shape: tuple[int, ...], threads: int) -> str:
    """Everything a baseline depends on, the timing method included (a change of it re-measures)."""
    return (f"{device_name(device)}|torch {torch.__version__}|{task_id}|{'x'.join(map(str, shape))}"
            f"|threads {threads}|timing v{timing.METHOD_VERSION}")


def measure_bandwidth(device: torch.device, reps: int = 20) -> float:
    """The device's memory bandwidth in bytes per second (`bandwidth_probe`'s figure)."""
    return bandwidth_probe(device, reps)["bandwidth_bytes_per_s"]


def bandwidth_probe(device: torch.device, reps: int = 20) -> dict:
    """The device's memory bandwidth, the better of a copy and a read-only sum, with the probe's own spread.

    Both tasks mostly read, and a read-only stream runs a little faster than a copy (no write-back
    turnarounds), so taking only the copy would put the best kernels above 100% of speed-of-light.
    `bandwidth_bytes_per_s` is each probe's median over `reps` calls, each call's time its batch's mean (as
    `timing.time_calls` times them, 3 warm-up calls, batches of MAX_BATCH). `bandwidth_probe` adds, per probe, the
    quartiles of the calls' own bandwidths (each call's events, not its batch's mean): the within-run spread that
    sandbox/plausibility.py's SOL_PROBE_MARGIN is set against.
    """
    n = BANDWIDTH_BYTES[device.type] // 4
    src = torch.ones(n, dtype=torch.float32, device=device)
    dst = torch.empty_like(src)
    clock = timing.DeviceClock(device)
    clock.calibrate()

    def probe(fn: Callable[[], object], nbytes: int) -> dict[str, float]:
        for _ in range(3):
            fn()
        clock.synchronize()
        means: list[float] = []
        calls: list[float] = []
        while len(means) < reps:
            timed = timing.time_batch(clock, [fn] * min(timing.MAX_BATCH, reps - len(means)))
            means += [timed.mean_ms] * len(timed.times_ms)
            calls += timed.times_ms
        per_s = nbytes / (np.asarray(calls) / 1e3)
        return {"bytes_per_s": nbytes / (sorted(means)[len(means) // 2] / 1e3),
                "q25_bytes_per_s": float(np.quantile(per_s, 0.25)), "q75_bytes_per_s": float(np.quantile(per_s, 0.75)),
                "min_bytes_per_s": float(per_s.min()), "max_bytes_per_s": float(per_s.max())}

    probes = {"copy": probe(lambda: dst.copy_(src), 2 * n * 4), "read": probe(lambda: src.sum(), n * 4)}
    chosen = max(probes, key=lambda name: probes[name]["bytes_per_s"])
    return {"bandwidth_bytes_per_s": probes[chosen]["bytes_per_s"],
            "bandwidth_probe": {"chosen": chosen, "reps": reps, "buffer_bytes": n * 4, **probes}}


def measure(task_id: str, device_str: str, shape: tuple[int, ...], names: tuple[str, ...], config: JudgeConfig) -> dict:
    torch.set_num_threads(config.child_threads)
    device = torch.device(device_str)
    task = get_task(task_id)
    if task.training is not None:  # the step (forward + backward), the forward alone, Liger (sandbox/training.py)
        from sandbox.training import measure_baselines

        return measure_baselines(task, device, shape, names, config)
    inputs = task.make_inputs(shape, task.distributions[0], 1234, device)
    model = task.model_cls().to(device)
    clock = timing.DeviceClock(device)
    clock.calibrate()
    result: dict = {"baselines": {}, **bandwidth_probe(device)}
    for name in names:
        fn = torch.compile(model) if name == "compile" else model
        est = timing.time_calls(clock, lambda: fn(*inputs), reps=3, warmup=2)
        reps, warmup = timing.plan_reps(sorted(est.times_ms)[1], config.timing_budget_ms, config.min_reps,
                                        config.max_reps)
        if device.type == "cuda":
            torch.cuda.reset_peak_memory_stats(device)
            base = torch.cuda.memory_allocated(device)
        # Batched as the candidate's calls are (sandbox/execute.py), so both are timed alike.
        batch = timing.batch_size(device, task.min_bytes(shape))
        times = timing.time_calls(clock, lambda: fn(*inputs), reps=reps, warmup=warmup, batch=batch)
        result["baselines"][name] = timing.summarize(times.times_ms)
        if name == "eager" and device.type == "cuda":
            result["reference_peak_memory_bytes"] = torch.cuda.max_memory_allocated(device) - base
    return result


def get_baselines(task_id: str, device: str, shape: tuple[int, ...], config: JudgeConfig) -> dict:
    """Cached baselines for this device model; measured in a trusted subprocess when missing."""
    config.cache_root.mkdir(parents=True, exist_ok=True)
    path = config.cache_root / CACHE_FILE
    key = cache_key(task_id, device, shape, config.child_threads)
    with open(config.cache_root / (CACHE_FILE + ".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # one measurement per key even with several workers
        cache = json.loads(path.read_text()) if path.exists() else {}
        if key in cache and set(config.baselines) <= set(cache[key]["baselines"]):
            return cache[key]
        out = config.cache_root / f"baseline-{os.getpid()}.json"
        subprocess.run(
            [sys.executable, "-c", _WATCHED_MAIN, str(os.getpid()), "--task", task_id, "--device", device,
             "--shape", ",".join(map(str, shape)), "--names", ",".join(config.baselines), "--out", str(out)],
            check=True, timeout=1800, env={**os.environ, "JUDGE_CHILD_THREADS": str(config.child_threads)},
        )
        cache[key] = json.loads(out.read_text())
        out.unlink()
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(cache, indent=1))
        tmp.replace(path)
        return cache[key]


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m sandbox.baseline")
    parser.add_argument("--task", required=True)
    parser.add_argument("--device", required=True)
    parser.add_argument("--shape", required=True)
    parser.add_argument("--names", default="eager,compile")
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    shape = tuple(int(x) for x in args.shape.split(","))
    result = measure(args.task, args.device, shape, tuple(args.names.split(",")), JudgeConfig())
    Path(args.out).write_text(json.dumps(result))


if __name__ == "__main__":
    main()
