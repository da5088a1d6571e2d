"""The profiled child: load a built candidate, call forward on official inputs, bracketed for the profiler.

UNTRUSTED once the candidate is imported, like sandbox/child/harness.py, but it decides nothing: it reports nothing to
the judge (ncu, its wrapper in the same sandbox, writes the profile), and nothing it could do changes a verdict
or a ranked time, only the candidate's own advisory profile. So it has none of the execution child's integrity
checks; it keeps the one guard that protects the host's time: the extension builder may only load what the
build stage built (sandbox/child/no_build.py), so no compile runs while the device is held.

Run as `python -m sandbox.child.profiled --task T --device cuda --source S --calls N --seed K`: one warm-up
call (lazy set-up, autotuning), then N calls between cudaProfilerStart and cudaProfilerStop, with a device
synchronisation after each. Exit status 0 when all ran; otherwise the error is on stderr and the status is 1.
"""

from __future__ import annotations

import argparse
import os
import sys
import traceback

import torch

from reference import OFFICIAL, TaskId, get_task
from sandbox.child import no_build
from sandbox.child.loading import load_model



def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def run(task_id: TaskId, device_name: str, source: str, calls: int, seed: int) -> None:
    device = torch.device(device_name)
    if device.type == "cuda":
        torch.cuda.set_device(device)
    task = get_task(task_id)
    guard = no_build.install()
    try:
        model = load_model(source, device)
    finally:
        guard.raise_if_refused()
    shape = task.official_shape if device.type == "cuda" else task.cpu_shape  # the CPU size: tests only
    inputs = task.make_inputs(shape, OFFICIAL, seed, device)
    with torch.no_grad():
        model(*inputs)  # warm-up, not profiled
        _sync(device)
        if device.type == "cuda":
            torch.cuda.profiler.start()
        for _ in range(calls):
            model(*inputs)
            _sync(device)
        if device.type == "cuda":
            torch.cuda.profiler.stop()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m sandbox.child.profiled")
    parser.add_argument("--task", required=True)
    parser.add_argument("--device", required=True)
    parser.add_argument("--source", required=True)
    parser.add_argument("--calls", type=int, default=3)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    torch.set_num_threads(int(os.environ.get("JUDGE_CHILD_THREADS", "1")))
    try:
        run(get_task(args.task).id, args.device, args.source, args.calls, args.seed)
    except BaseException as exc:  # noqa: BLE001 - the candidate's failure, reported on stderr for the judge
        traceback.print_exc(limit=-6)
        print(f"[profile] {type(exc).__name__}: {exc}"[:2000], file=sys.stderr, flush=True)
        return 1
    return 0


if __name__ == "__main__":
    code = main()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)  # no interpreter teardown of torch and the context (see sandbox/child/__main__.py exit_now)
