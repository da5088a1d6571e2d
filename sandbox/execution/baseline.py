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
from pathlib import Path

import torch

from reference import TaskId
from sandbox import scheduling
from sandbox.config import JudgeConfig
from sandbox.environment import device_name
from sandbox.shared import timing

CACHE_FILE = "baselines.json"
INDUCTOR_CACHE = "inductor"
"""Under the cache root: torch inductor's on-disk cache of the measurement processes (TORCHINDUCTOR_CACHE_DIR)."""
PREWARM_LOCK = "prewarm.lock"
"""Under the cache root: held by the one `prewarm_compile` running there."""
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


def _read(path: Path) -> dict:
    """The baseline cache file's entries ({} before the first measurement)."""
    return json.loads(path.read_text()) if path.exists() else {}


def _cached(cache: dict, key: str, config: JudgeConfig) -> dict | None:
    """The cached baselines of `key`, where every one the config asks for is there."""
    return cache[key] if key in cache and set(config.baselines) <= set(cache[key]["baselines"]) else None


def _measure(task_id: TaskId, device: str, shape: tuple[int, ...], config: JudgeConfig, out: Path, *extra: str) -> dict:
    """`python -m sandbox.execution.measure_baselines` in its watched process; its JSON."""
    # Inductor's cache where the operator put it (TORCHINDUCTOR_CACHE_DIR), else the judge's own beside its other
    # caches (a volume keeps it across restarts; torch's default is under /tmp): where `prewarm_compile` leaves the
    # reference's compiled graphs for the measurement to find.
    inductor = os.environ.get("TORCHINDUCTOR_CACHE_DIR") or str(config.cache_root / INDUCTOR_CACHE)
    env = {**os.environ, "JUDGE_CHILD_THREADS": str(config.child_threads), "TORCHINDUCTOR_CACHE_DIR": inductor}
    argv = [sys.executable, "-c", _WATCHED_MAIN, str(os.getpid()), "--task", task_id, "--device", device,
            "--shape", ",".join(map(str, shape)), "--names", ",".join(config.baselines), "--out", str(out), *extra]
    # A niced caller's measurement runs under setsid(), so the kernel gives it an autogroup of its own, niced as
    # much: a nice value counts only among the processes of one autogroup, here the worker's (sandbox/scheduling.py).
    with subprocess.Popen(argv, env=env, start_new_session=scheduling.thread_nice() > 0) as proc:
        scheduling.pass_on_nice(proc.pid)
        try:
            code = proc.wait(timeout=1800)
        except subprocess.TimeoutExpired:
            proc.kill()
            raise
    if code != 0:
        raise subprocess.CalledProcessError(code, argv)
    try:
        return json.loads(out.read_text())
    finally:
        out.unlink(missing_ok=True)


def get_baselines(task_id: TaskId, device: str, shape: tuple[int, ...], config: JudgeConfig) -> dict:
    """Cached baselines for this device model; measured in a trusted subprocess when missing."""
    config.cache_root.mkdir(parents=True, exist_ok=True)
    path = config.cache_root / CACHE_FILE
    key = cache_key(task_id, device, shape, config.child_threads)
    with open(config.cache_root / (CACHE_FILE + ".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # one measurement per key even with several workers
        cache = _read(path)
        cached = _cached(cache, key, config)
        if cached is not None:
            return cached
        cache[key] = _measure(task_id, device, shape, config, config.cache_root / f"baseline-{os.getpid()}.json")
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(cache, indent=1))
        tmp.replace(path)
        return cache[key]


def prewarm_compile(task_id: TaskId, device: str, shape: tuple[int, ...], config: JudgeConfig) -> dict | None:
    """Compile the reference into the judge's inductor cache ahead of its first measurement, timing nothing; None
    when there is nothing to do (the baselines are cached, or torch.compile is not among them).

    Why: the first candidate of a task on a host waits for its baselines, and on a 2-core CPU host torch.compile is
    most of that (a measurement of 23 s on an idle 2-core box, 7 s with the graphs in the cache), after its build. A
    worker runs this in the background as it starts (service/worker/warmup.py). Only the compilation is done ahead: the
    timings stay measured when a candidate needs them, so a host busy with its start does not slow what is cached.
    The measurement then loads the same graphs inductor compiled here (its cache is keyed by the graph, the inputs'
    shapes, the torch version and its configuration); `compile_cache` in the baselines says it hit.
    Returns the compile's graph-cache misses and hits."""
    if "compile" not in config.baselines:
        return None
    config.cache_root.mkdir(parents=True, exist_ok=True)
    # Written whole (a temporary file, then a rename): read without the measurement's lock, which a prewarm must not
    # hold (a candidate's measurement would wait for this niced compile instead of compiling itself).
    if _cached(_read(config.cache_root / CACHE_FILE), cache_key(task_id, device, shape, config.child_threads), config):
        return None
    with open(config.cache_root / PREWARM_LOCK, "w") as lock:
        try:  # one prewarm at a time per cache root: workers sharing it would compile the same graphs
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return None
        return _measure(task_id, device, shape, config, config.cache_root / f"prewarm-{os.getpid()}.json",
                        "--compile-only")
