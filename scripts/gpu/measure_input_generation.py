"""What making a timed call's inputs costs on the device, and whether it ever waits for the host.

The judge makes each timed call's inputs inside the timed round trip, right before the call (issue 39: the inputs
must not exist before `go`), and bounds the device time between the call's events against the parent's own
making of the same inputs. That bound is only as tight as making the inputs is repeatable, and only holds if
making them never synchronises with the host (a wait there is host latency inside the device's record). This
prints, per task and distribution at the official shape:

- `syncs`: whether `make_inputs` synchronises (torch's sync debug mode set to raise);
- device time of `make_inputs` alone (events around it, the device otherwise idle): median and spread;
- one read of the inputs (a `sum` of each), the cost of a memory-bound call, for the ratio;
- a queued batch of three (make, flush, read) back to back: the device span against the sum of its parts, which
  is ~0 when the host keeps ahead of the device.

Run on a GPU host: `python scripts/gpu/measure_input_generation.py --out results/inputs.json`.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from collections.abc import Callable

import torch

from reference import Task, TaskId, get_task

REPS = 15
FLUSH_BYTES = 256 << 20


def _quantiles(values: list[float]) -> dict[str, float]:
    ordered = sorted(values)
    q = statistics.quantiles(ordered, n=4) if len(ordered) > 1 else [ordered[0]] * 3
    return {"median": round(statistics.median(ordered), 5), "q25": round(q[0], 5), "q75": round(q[2], 5),
            "min": round(ordered[0], 5), "max": round(ordered[-1], 5)}


def _syncs(task: Task, shape: tuple[int, ...], distribution: str, device: torch.device) -> str:
    torch.cuda.set_sync_debug_mode("error")
    try:
        task.make_inputs(shape, distribution, 12345, device)
        return "no"
    except RuntimeError as exc:
        return f"yes: {str(exc).splitlines()[0][:160]}"
    finally:
        torch.cuda.set_sync_debug_mode("default")


def _timed(fn: Callable[[], object], reps: int) -> tuple[list[float], list[float]]:
    device_ms, host_ms = [], []
    for _ in range(reps):
        torch.cuda.synchronize()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        t0 = time.perf_counter()
        start.record()
        fn()
        end.record()
        host_ms.append((time.perf_counter() - t0) * 1e3)
        torch.cuda.synchronize()
        device_ms.append(start.elapsed_time(end))
    return device_ms, host_ms


def _queued(task: Task, shape: tuple[int, ...], distribution: str, device: torch.device,
            flush: torch.Tensor) -> dict[str, object]:
    """Three (make, flush, read) back to back between two synchronisations, events around each part."""
    torch.cuda.synchronize()
    marks = [torch.cuda.Event(enable_timing=True) for _ in range(10)]
    kept = []
    marks[0].record()
    for i in range(3):
        inputs = task.make_inputs(shape, distribution, 777 + i, device)
        marks[3 * i + 1].record()
        flush.zero_()
        marks[3 * i + 2].record()
        kept.append([t.sum() for t in inputs if t.is_floating_point()])
        marks[3 * i + 3].record()
    torch.cuda.synchronize()
    spans = [marks[j].elapsed_time(marks[j + 1]) for j in range(9)]
    return {"span_ms": round(marks[0].elapsed_time(marks[9]), 5), "make_ms": [round(spans[3 * i], 5) for i in range(3)],
            "flush_ms": [round(spans[3 * i + 1], 5) for i in range(3)],
            "read_ms": [round(spans[3 * i + 2], 5) for i in range(3)]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="")
    parser.add_argument("--tasks", default="kl_div,cross_entropy")
    args = parser.parse_args()
    device = torch.device("cuda:0")
    torch.cuda.set_device(device)
    flush = torch.empty(FLUSH_BYTES // 4, dtype=torch.int32, device=device)
    rows = []
    for task_id in args.tasks.split(","):
        task = get_task(TaskId(task_id))
        shape = task.official_shape
        for distribution in task.distributions:
            task.make_inputs(shape, distribution, 1, device)  # allocator and kernels warm
            syncs = _syncs(task, shape, distribution, device)
            make_dev, make_host = _timed(lambda: task.make_inputs(shape, distribution, 4242, device), REPS)
            made = task.make_inputs(shape, distribution, 99, device)
            read_dev, _ = _timed(lambda made=made: [t.sum() for t in made if t.is_floating_point()], REPS)
            del made
            queued = [_queued(task, shape, distribution, device, flush) for _ in range(3)]
            row = {"task": task_id, "distribution": distribution, "shape": list(shape), "syncs": syncs,
                   "make_device_ms": _quantiles(make_dev), "make_host_ms": _quantiles(make_host),
                   "read_device_ms": _quantiles(read_dev), "queued": queued}
            rows.append(row)
            gap = [q["span_ms"] - sum(q["make_ms"]) - sum(q["flush_ms"]) - sum(q["read_ms"]) for q in queued]
            make = row["make_device_ms"]
            print(f"{task_id:14s} {distribution:20s} syncs={syncs[:40]:40s} make {make['median']:.4f} ms "
                  f"[{make['q25']:.4f}, {make['q75']:.4f}] host {row['make_host_ms']['median']:.3f} "
                  f"read {row['read_device_ms']['median']:.4f} queued gap {max(gap):.4f} ms", flush=True)
    info = {"device": torch.cuda.get_device_name(device), "torch": torch.__version__, "cuda": torch.version.cuda,
            "date": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()), "rows": rows}
    if args.out:
        with open(args.out, "w") as fh:
            json.dump(info, fh, indent=1)


if __name__ == "__main__":
    main()
