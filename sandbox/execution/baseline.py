"""Reference timings (eager and torch.compile) and the device's memory bandwidth, per device model.

Measured in a trusted subprocess of its own (`python -m sandbox.execution.measure_baselines`), never in a process
that imported candidate code, with the same `timing` code as the candidate's measurement so speedups
compare like with like. Results are cached per (device model, torch, task, shape, threads) because
torch.compile takes tens of seconds; delete the cache file to refresh.
"""

from __future__ import annotations

import fcntl
import json
import os
import subprocess
import sys

import torch

from reference import TaskId
from sandbox.config import JudgeConfig
from sandbox.environment import device_name
from sandbox.shared import timing

CACHE_FILE = "baselines.json"
_WATCHED_MAIN = """\
import ctypes, os, runpy, sys
ctypes.CDLL(None, use_errno=True).prctl(1, 9, 0, 0, 0)  # PR_SET_PDEATHSIG = SIGKILL
if os.getppid() != int(sys.argv.pop(1)):
    sys.exit("sandbox.execution.measure_baselines: the worker that started it had already exited")
runpy.run_module("sandbox.execution.measure_baselines", run_name="__main__", alter_sys=True)
"""
"""`python -c _WATCHED_MAIN PARENT_PID ARGS...` is `python -m sandbox.execution.measure_baselines ARGS...` that the
kernel SIGKILLs
when the worker (thread) that started it dies, so a killed worker leaves no full-CPU measurement behind.

The child asks for the signal itself, after exec: the worker is multi-threaded, and a pre-exec callback of `Popen` runs
Python between fork and exec, which deadlocks when another thread holds the import or logging lock
(sandbox/isolation.py). It asks before importing the `sandbox` package (seconds, torch included), so an
orphan does not live through the import; the parent-pid check catches a worker that died before the
request. Done in Python rather than with `setpriv --pdeathsig`, which needs util-linux 2.33 or later,
in a package some distributions ship separately: the interpreter is always there."""


def cache_key(task_id: TaskId, device: str, shape: tuple[int, ...], threads: int) -> str:
    """Everything a baseline depends on, the timing method included (a change of it re-measures)."""
    return (f"{device_name(device)}|torch {torch.__version__}|{task_id}|{'x'.join(map(str, shape))}"
            f"|threads {threads}|timing v{timing.METHOD_VERSION}")


def get_baselines(task_id: TaskId, device: str, shape: tuple[int, ...], config: JudgeConfig) -> dict:
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
