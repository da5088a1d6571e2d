"""The reference's torch.compile, done in the background as a CPU worker starts (Settings.warm_baselines).

Why: the first candidate of a task on a host waits for its baselines (sandbox/execution/baseline.py), and on a small
CPU host most of that wait is torch.compile of the reference: a fresh 2-core box's first verdict spent 28.8 s in its
baselines, 12.9 s with the compile done ahead. `sandbox.prewarm_compile` compiles it into the judge's inductor cache
and times nothing; the measurement, when the first candidate needs it, loads those graphs.

The first task's compile runs at the worker's own priority, beside the first shared header's build
(service/worker/headers.py), which also runs at it: on a fresh host the first candidate waits for that header anyway,
and the first task is the one it most likely has (Settings.warm_baselines' order). Niced, it would get no CPU while
the header, the candidate's build and the full header after it run: on a fresh 2-core box (scripts/tour.py) it then
ends after the first verdict, whose baselines compile the reference themselves (29 s), against 10-12 s of baselines
with this compile at the worker's priority. Every later task's compile runs at the lowest priority (its compilers
inherit it), so a candidate's build or timing that comes meanwhile comes first for the CPUs.

Only CPU devices: on a GPU the compile would start a second process on the device (a context, its memory, inductor's
benchmarks) beside a candidate's timed calls, which the judge keeps alone on it.
"""

from __future__ import annotations

import logging
import os
import threading
import time

import sandbox
from reference import get_task

log = logging.getLogger(__name__)

NICE = 19
"""The niceness of the warm-up thread after its first task, and of the compiler processes it starts then."""


def start(config: sandbox.JudgeConfig, devices: list[str], tasks: list[str]) -> threading.Thread | None:
    """Compile `tasks`' references for the CPU among `devices` on a daemon thread, the first at the caller's priority
    and the rest niced; None when there is nothing to do."""
    if not tasks or "cpu" not in {d.partition(":")[0] for d in devices}:
        return None
    thread = threading.Thread(target=_run, args=(config, tasks), name="baseline-warmup", daemon=True)
    thread.start()
    return thread


def _run(config: sandbox.JudgeConfig, tasks: list[str]) -> None:
    for index, task in enumerate(map(get_task, tasks)):
        if index == 1:
            os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), NICE)
        started = time.monotonic()
        try:
            cache = sandbox.prewarm_compile(task.id, "cpu", task.cpu_shape, config)
        except Exception:  # the first candidate then compiles it, as before: never the worker's end
            log.exception("compiling the %s reference ahead of its baselines failed", task.id)
            continue
        if cache is not None:
            log.info("compiled the %s reference ahead of its baselines in %.1f s (inductor graphs: %s)", task.id,
                     time.monotonic() - started, cache)
