"""Measures the reference timings (eager and torch.compile, of the forward or of a training step; Liger's fused
loss where it fits) and the device's memory bandwidth: the entry module of the trusted subprocess that
sandbox/execution/baseline.py starts (`python -m sandbox.execution.measure_baselines`), never a process that
imported candidate code. Nothing imports it, so it runs as one copy, `__main__`.

It times the reference with the execution child's own loop (sandbox/child/timing.py), so a candidate and its baseline
are timed alike: the one module outside sandbox/child/ that imports from there (tests/test_lint.py names it), and it
runs in a trusted process of its own, never in the judge's.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any, Callable

import numpy as np
import torch

from reference import Task, TaskId, get_task
from reference.training import full_gradient
from sandbox.shared.compare import compare
from sandbox.config import JudgeConfig
from sandbox.child import timing as child_timing
from sandbox.execution import timing

BANDWIDTH_BYTES = {"cuda": 1 << 30, "cpu": 256 << 20}
"""Copy size for the bandwidth probe: far beyond any cache, so it measures memory."""

def measure_bandwidth(device: torch.device, reps: int = 20) -> float:
    """The device's memory bandwidth in bytes per second (`bandwidth_probe`'s figure)."""
    return bandwidth_probe(device, reps)["bandwidth_bytes_per_s"]


def bandwidth_probe(device: torch.device, reps: int = 20) -> dict:
    """The device's memory bandwidth, the better of a copy and a read-only sum, with the probe's own spread.

    Both tasks mostly read, and a read-only stream runs a little faster than a copy (no write-back
    turnarounds), so taking only the copy would put the best kernels above 100% of speed-of-light.
    `bandwidth_bytes_per_s` is each probe's median over `reps` calls, each call's time its batch's mean (as
    `child_timing.time_calls` times them, 3 warm-up calls, batches of MAX_BATCH). `bandwidth_probe` adds, per probe, the
    quartiles of the calls' own bandwidths (each call's events, not its batch's mean): the within-run spread that
    sandbox/execution/plausibility.py's SOL_PROBE_MARGIN is set against.
    """
    n = BANDWIDTH_BYTES[device.type] // 4
    src = torch.ones(n, dtype=torch.float32, device=device)
    dst = torch.empty_like(src)
    clock = child_timing.DeviceClock(device)
    clock.calibrate()

    def probe(fn: Callable[[], object], nbytes: int) -> dict[str, float]:
        for _ in range(3):
            fn()
        clock.synchronize()
        means: list[float] = []
        calls: list[float] = []
        while len(means) < reps:
            timed = child_timing.time_batch(clock, [fn] * min(timing.MAX_BATCH, reps - len(means)))
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


def measure(task_id: TaskId, device_str: str, shape: tuple[int, ...], names: tuple[str, ...],
            config: JudgeConfig) -> dict:
    torch.set_num_threads(config.child_threads)
    device = torch.device(device_str)
    task = get_task(task_id)
    if task.training is not None:  # the step (forward + backward), the forward alone, Liger
        return measure_training(task, device, shape, names, config)
    inputs = task.make_inputs(shape, task.distributions[0], 1234, device)
    model = task.model_cls().to(device)
    clock = child_timing.DeviceClock(device)
    clock.calibrate()
    result: dict = {"baselines": {}, **bandwidth_probe(device)}
    for name in names:
        fn = torch.compile(model) if name == "compile" else model
        est = child_timing.time_calls(clock, lambda: fn(*inputs), reps=3, warmup=2)
        reps, warmup = timing.plan_reps(sorted(est.times_ms)[1], config.timing_budget_ms, config.min_reps,
                                        config.max_reps_on(device.type))
        if device.type == "cuda":
            torch.cuda.reset_peak_memory_stats(device)
            base = torch.cuda.memory_allocated(device)
        # Batched as the candidate's calls are (sandbox/execution/phases.py), so both are timed alike.
        batch = timing.batch_size(device, task.min_bytes(shape))
        times = child_timing.time_calls(clock, lambda: fn(*inputs), reps=reps, warmup=warmup, batch=batch)
        result["baselines"][name] = timing.summarize(times.times_ms)
        if name == "eager" and device.type == "cuda":
            result["reference_peak_memory_bytes"] = torch.cuda.max_memory_allocated(device) - base
    return result



def _liger_loss(task: Task) -> Callable[[torch.Tensor, torch.Tensor], torch.Tensor] | None:
    """Liger-Kernel's fused loss for this task with the task's semantics, or None where it is not installed.

    kl_div: LigerKLDIVLoss(reduction="batchmean") takes log-probabilities, like F.kl_div, so the step is
    liger(log(predictions), targets) (the log and its backward are part of what a user of it pays).
    cross_entropy: LigerCrossEntropyLoss() with its defaults (mean, ignore_index -100) is F.cross_entropy.
    Note: Liger's cross entropy writes the gradient into the logits' memory during the forward.
    """
    try:
        # optional: absent where Liger-Kernel is not installed
        from liger_kernel.transformers import LigerCrossEntropyLoss, LigerKLDIVLoss
    except Exception:  # noqa: BLE001 - not installed (or broken): the row is skipped and says so
        return None
    if task.training.forward_task == TaskId.KL_DIV:
        kl = LigerKLDIVLoss(reduction="batchmean", log_target=False)
        return lambda p, t: kl(torch.log(p), t)
    ce = LigerCrossEntropyLoss()
    return lambda x, y: ce(x, y)


def _agrees(task: Task, fn: Callable[..., torch.Tensor], inputs: list[torch.Tensor]) -> str | None:
    """None when fn's loss and gradient match fp64 truth within the task's tolerances, else why not."""
    leaf = inputs[0].detach().clone().requires_grad_(True)
    rest = [t.clone() for t in inputs[1:]]
    truth_loss = float(task.ground_truth(inputs))
    truth_grad = full_gradient(task, inputs) * inputs[0].shape[0]
    loss = fn(leaf, *rest)
    loss.backward()
    got = compare(loss.detach().cpu().reshape(()), torch.tensor(truth_loss, dtype=torch.float64),
                  task.tolerance.atol, task.tolerance.rtol)
    if not got.passed:
        return f"loss: {got.message}"
    tol = task.training.gradient_tolerance
    rows = inputs[0].shape[0]
    magnitude = task.training.gradient_magnitude(inputs, 0, rows, truth_grad)
    error = (leaf.grad.double() * rows - truth_grad).abs()
    bad = error > tol.atol + tol.rtol * magnitude
    return None if not bool(bad.any()) else (f"gradient: {int(bad.sum())} elements outside the tolerance, worst error "
                                             f"{float(error.max()):.3g} (per-row units)")


def measure_training(task: Task, device: torch.device, shape: tuple[int, ...], names: tuple[str, ...],
                      config: Any) -> dict:
    """Eager and torch.compile of the step (and of the forward alone), plus Liger's fused loss where it fits."""
    inputs = task.make_inputs(shape, task.distributions[0], 1234, device)
    leaf = inputs[task.training.grad_input].detach().clone().requires_grad_(True)
    args = [leaf, *inputs[1:]]
    model = task.model_cls().to(device)
    clock = child_timing.DeviceClock(device)
    clock.calibrate()
    result: dict = {"baselines": {}, "forward_baselines": {}, "skipped": {},
                    "bandwidth_bytes_per_s": measure_bandwidth(device)}

    def timed(fn: Callable[[], object]) -> tuple[dict, int | None]:
        est = child_timing.time_calls(clock, fn, reps=3, warmup=2)
        reps, warmup = timing.plan_reps(sorted(est.times_ms)[1], config.timing_budget_ms, config.min_reps,
                                        config.max_reps_on(device.type))
        base = None
        if device.type == "cuda":
            torch.cuda.reset_peak_memory_stats(device)
            base = torch.cuda.memory_allocated(device)
        times = child_timing.time_calls(clock, fn, reps=reps, warmup=warmup)
        peak = torch.cuda.max_memory_allocated(device) - base if base is not None else None
        return timing.summarize(times.times_ms), peak

    def step_of(fn: Callable[..., torch.Tensor]) -> Callable[[], object]:
        def step() -> object:
            leaf.grad = None
            loss = fn(*args)
            loss.backward()
            return loss
        return step

    for name in names:
        fn = torch.compile(model) if name == "compile" else model
        result["baselines"][name], peak = timed(step_of(fn))
        if name == "eager" and peak is not None:
            result["reference_peak_memory_bytes"] = peak
        result["forward_baselines"][name], _ = timed(lambda fn=fn: fn(*args))
    liger = _liger_loss(task) if device.type == "cuda" else None
    if liger is None:
        result["skipped"]["liger"] = ("Liger-Kernel is not installed" if device.type == "cuda"
                                      else "Liger-Kernel runs on CUDA only")
    else:
        why = _agrees(task, liger, task.make_inputs(shape, "planted", 4321, device))
        if why:
            result["skipped"]["liger"] = f"disagrees with the fp64 truth: {why}"
        else:
            result["baselines"]["liger"], result["liger_peak_memory_bytes"] = timed(step_of(liger))
    return result


def compile_reference(task_id: TaskId, device_str: str, shape: tuple[int, ...], config: JudgeConfig) -> dict:
    """torch.compile of the reference run once on the task's inputs (a training step: forward and backward, and the
    forward alone), nothing timed. What it leaves is inductor's on-disk cache (TORCHINDUCTOR_CACHE_DIR, which
    sandbox/execution/baseline.py points under the judge's cache root), where `measure` then finds the same graphs
    compiled: tens of seconds of a first measurement on a small CPU host (23 s against 7 s, 2 cores) spent before the
    first candidate needs them. Returns the graphs' cache misses and hits."""
    torch.set_num_threads(config.child_threads)
    device = torch.device(device_str)
    task = get_task(task_id)
    inputs = task.make_inputs(shape, task.distributions[0], 1234, device)
    fn = torch.compile(task.model_cls().to(device))
    if task.training is None:
        fn(*inputs)
    else:
        leaf = inputs[task.training.grad_input].detach().clone().requires_grad_(True)
        fn(leaf, *inputs[1:]).backward()
        fn(leaf, *inputs[1:])
    return compile_cache()


def compile_cache() -> dict[str, int]:
    """This process's inductor graph-cache misses and hits: a measurement after `compile_reference` hits."""
    from torch._dynamo.utils import counters  # dynamo's, loaded where a compile ran (torch.compile imports it anyway)

    return {"misses": int(counters["inductor"]["fxgraph_cache_miss"]),
            "hits": int(counters["inductor"]["fxgraph_cache_hit"])}


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m sandbox.execution.measure_baselines")
    parser.add_argument("--task", required=True)
    parser.add_argument("--device", required=True)
    parser.add_argument("--shape", required=True)
    parser.add_argument("--names", default="eager,compile")
    parser.add_argument("--out", required=True)
    parser.add_argument("--compile-only", action="store_true",
                        help="compile the reference into inductor's cache, time nothing (compile_reference)")
    args = parser.parse_args()
    shape = tuple(int(x) for x in args.shape.split(","))
    task_id, names = get_task(args.task).id, tuple(args.names.split(","))
    if args.compile_only:
        result = compile_reference(task_id, args.device, shape, JudgeConfig())
    else:
        result = measure(task_id, args.device, shape, names, JudgeConfig())
        if "compile" in names:
            result["compile_cache"] = compile_cache()
    Path(args.out).write_text(json.dumps(result))


if __name__ == "__main__":
    main()
