"""What the kernel trace's recorder costs a short timed call, and why (issue 28): one process per recorder variant,
the judge's own batch timing (`time_cuda_batch`, its flushes and lead) around short and long torch workloads.

The judge's trace (torch's profiler with CPU and CUDA activity, `record_function` annotations) cost the 0.19 ms
cross-entropy calls +94% and the Triton ones +168% from the second round of pre-started children on (see
docs/results/trace-h100-2026-11-26.md). A batch queues flushes and calls ahead of the device; if the host's work per
call (the profiler's operator callbacks, the annotations) outgrows the device's, the device waits inside the calls'
timing events. This script prints, per variant and workload, the median event time per call, the host's time per
call and the device's, so the cause is read off, not guessed:

- `off`: no profiler (the ranked time);
- `host_and_device`: the recorder as the judge ran it until 2026-11-26 (CPU and CUDA activity, a `record_function`
  annotation around each call, each canary and each flush, and the canaries);
- `host_and_device_aged`: the same after the segments a child's trials cut (pause, a trial's own profile, resume);
- `device_only`: the recorder as the judge runs it now (CUDA activity alone, the canaries the only marks);
- `device_only_aged`: the same after the trials' segments.

GPU machine: `source scripts/gpu/device_env.sh && python3 scripts/gpu/trace_overhead.py --out $OUT/overhead`
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

VARIANTS = ("off", "host_and_device", "host_and_device_aged", "device_only", "device_only_aged")
WORKLOADS = {
    # name: (rows, cols, what) - the tasks' official shapes and a shorter one, where the host's cost shows most
    "ce_32768x4096": (32768, 4096, "cross_entropy"),
    "ce_8192x4096": (8192, 4096, "cross_entropy"),
    "kl_16384x16384": (16384, 16384, "kl_div"),
    "many_small_ops": (4096, 1024, "chain"),
}


class AnnotatedMarks:
    """The marks of the recorder until 2026-11-26: each canary, flush and call inside a `record_function`
    annotation (recorded only with host activity on)."""

    def __init__(self, recorder: Any) -> None:
        import torch
        self.recorder = recorder
        self.enter = torch.ops.profiler._record_function_enter_new
        self.exit = torch.ops.profiler._record_function_exit._RecordFunction
        self.calls = 0

    def canary(self) -> None:
        handle = self.enter("judge/harness/canary", None)
        self.recorder.canary()
        self.exit(handle)
        if self.recorder._canaries % 2:  # the call's own annotation, then (after its closing canary) the flush's
            self.open = self.enter(f"judge/timed/{self.calls}", None)
            self.calls += 1
        else:
            self.exit(self.open)
            self.exit(self.enter("judge/harness/flush", None))


def workload(name: str, device: Any) -> Callable[[], object]:
    import torch
    from torch.nn import functional
    rows, cols, what = WORKLOADS[name]
    gen = torch.Generator(device=device).manual_seed(0)
    x = torch.randn(rows, cols, device=device, generator=gen)
    if what == "cross_entropy":
        t = torch.randint(0, cols, (rows,), device=device, generator=gen)
        return lambda: functional.cross_entropy(x, t)
    if what == "kl_div":
        y = torch.randn(rows, cols, device=device, generator=gen).softmax(-1)
        lx = x.log_softmax(-1)
        return lambda: functional.kl_div(lx, y, reduction="batchmean")
    return lambda: ((x * 2 + 1).relu().sum(-1) * 0.5).exp().mean()  # 7 short kernels


def one_variant(variant: str, batches: int, batch: int) -> dict:
    import torch
    from sandbox.child.recorder import Recorder
    from sandbox.child.timing import DeviceClock, time_cuda_batch
    device = torch.device("cuda:0")
    clock = DeviceClock(device)
    clock.calibrate()
    recorder = marks = None
    if variant != "off":
        recorder = Recorder(device)
        if variant.startswith("host_and_device"):
            recorder.activities = [torch.profiler.ProfilerActivity.CPU, torch.profiler.ProfilerActivity.CUDA]
        recorder.start(b"k" * 16)
        marks = AnnotatedMarks(recorder) if variant.startswith("host_and_device") else recorder
    out = {"variant": variant, "lead_flushes": clock.lead_flushes, "flush_ms": clock.flush_ms, "workloads": {}}
    for name in WORKLOADS:
        fn = workload(name, device)
        for _ in range(10):
            fn()
        torch.cuda.synchronize()
        if variant.endswith("_aged"):  # a child's trials: each pauses the life trace around a profile of its own
            for _ in range(8):
                recorder.pause()
                with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU,
                                                        torch.profiler.ProfilerActivity.CUDA]):
                    for _ in range(3):
                        fn()
                    torch.cuda.synchronize()
                recorder.resume()
                for _ in range(50):
                    fn()
                torch.cuda.synchronize()
        medians, host_per_call, hidden = [], [], 0
        for _ in range(batches):
            t0 = time.perf_counter()
            timed = time_cuda_batch(clock, [fn] * batch, marks=marks)
            host_per_call.append((time.perf_counter() - t0) * 1e3 / batch)
            medians.append(statistics.median(timed.events_ms))
            hidden += timed.hidden_work
        # the host's own time per call, the device kept busy by nothing: what the host must stay under
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        for _ in range(batch):
            if marks is not None:
                marks.canary()
            fn()
            if marks is not None:
                marks.canary()
        host_enqueue = (time.perf_counter() - t0) * 1e3 / batch
        torch.cuda.synchronize()
        out["workloads"][name] = {"median_ms": statistics.median(medians), "min_ms": min(medians),
                                  "max_ms": max(medians), "host_ms_per_call_in_batch": statistics.median(host_per_call),
                                  "host_enqueue_ms_per_call": host_enqueue, "hidden_batches": hidden}
    if recorder is not None:  # what the record holds: the canaries with their bytes, annotations or none
        from sandbox.shared import trace
        files = recorder.finish()["files"]
        kinds: dict[str, int] = {}
        windows = canaries = 0
        for name in files:
            records, wins = trace.parse_chrome_trace(Path(name).read_text())
            windows += len(wins)
            canaries += sum(1 for r in records if r.kind == "memcpy" and 0 < r.bytes <= trace.MAX_CANARY_BYTES)
            for r in records:
                kinds[r.kind] = kinds.get(r.kind, 0) + 1
        out["record"] = {"segments": len(files), "kinds": kinds, "windows": windows, "canary_sized_copies": canaries,
                         "canaries_queued": recorder._canaries}
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--variant", choices=VARIANTS)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--batches", type=int, default=8)
    parser.add_argument("--batch", type=int, default=20)
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    if args.variant:  # one process, one variant: its JSON on stdout's last line
        import os
        import tempfile
        os.chdir(tempfile.mkdtemp())  # the recorder's segments: read here, not sent back
        print(json.dumps(one_variant(args.variant, args.batches, args.batch)))
        return
    results = []
    for r in range(args.rounds):
        for variant in VARIANTS:
            proc = subprocess.run([sys.executable, __file__, "--out", str(args.out), "--variant", variant,
                                   "--batches", str(args.batches), "--batch", str(args.batch)],
                                  capture_output=True, text=True, timeout=300)
            if proc.returncode != 0:
                print(f"{variant}: rc {proc.returncode}\n{proc.stderr[-2000:]}", flush=True)
                continue
            result = json.loads(proc.stdout.strip().splitlines()[-1]) | {"round": r}
            results.append(result)
            print(f"round {r} {variant}: record {result.get('record')}", flush=True)
            for name, w in result["workloads"].items():
                print(f"round {r} {variant:15s} {name:16s} median {w['median_ms']:.4f} ms "
                      f"[{w['min_ms']:.4f}-{w['max_ms']:.4f}] host/call in batch {w['host_ms_per_call_in_batch']:.4f} "
                      f"enqueue/call {w['host_enqueue_ms_per_call']:.4f} hidden {w['hidden_batches']}", flush=True)
            (args.out / "trace_overhead.json").write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
