"""Measure how far honest fp32 computations land from fp64 ground truth, per task, shape and distribution.

The tolerances in reference/kl_div.py and reference/cross_entropy.py cite these figures. Examples:

    python scripts/gpu/measure_tolerance.py --device cpu                       # CPU size + one larger size
    python scripts/gpu/measure_tolerance.py --device cuda                      # official + extra shapes
    python scripts/gpu/measure_tolerance.py --device cuda --compile --seeds 5
    python scripts/gpu/measure_tolerance.py --device cpu --kl-shapes 64x512 2048x16384 --ce-shapes 8192x4096

Honest implementations, all fp32 end to end:
- torch:  the reference Model itself (PyTorch's own fp32 kernels).
- block:  what a typical one-block-per-row GPU kernel does: 256 threads each sum a strided slice
          sequentially, the 256 partials are tree-reduced, the row results are accumulated one by one
          (an atomicAdd into one fp32 scalar).
- naive:  one sequential fp32 sum over each row, then one sequential fp32 sum over the rows: the worst
          reduction order a simple honest kernel might use.
- compile (with --compile): torch.compile of the reference.
Also printed: the fp64 loss (mean over seeds) and its relative spread across seeds (std / |mean|), which
says how well a constant answer could do.

`--gradient` measures the training variants' gradients instead (reference/training.py cites the figures):
every element of batch * gradient / scale (per-row units) against fp64 truth, for honest fp32 backwards:
- torch:    autograd of the reference Model in fp32 (loss.backward(scale)).
- closed:   the closed form as a kernel writes it: kl_div -(t / p) * (scale / B); cross_entropy
            (exp(x - max) / sum - onehot) * (scale / B), the row sum reduced as the 'block' kernel does.
- logspace: kl_div -exp(log t - log p) * scale / B;  lse: cross_entropy (exp(x - lse) - onehot) * scale / B.
Cells: max relative error where |truth| >= 1e-3 / max absolute error, and the worst ratio of the error to
the task's gradient tolerance (atol + rtol * magnitude, see reference/training.py; under 1 passes).

    python scripts/gpu/measure_tolerance.py --device cpu --gradient
    python scripts/gpu/measure_tolerance.py --device cuda --gradient --seeds 2
"""

from __future__ import annotations

import argparse
import math
import statistics
import time
from typing import Callable

import numpy as np
import torch

from reference import Task, TaskId, all_tasks
from reference.task import row_chunks

THREADS = 256
"""Threads per row in the 'block' emulation."""


# --- per-row fp32 values ----------------------------------------------------------------------------

def _kl_terms(p: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
    # A zero target contributes 0 (xlogy), as in the reference and every honest kernel ("sparse" has zeros).
    return torch.where(t > 0, t * (torch.log(t) - torch.log(p)), torch.zeros((), device=t.device))


def _sequential_row_sums(terms: torch.Tensor) -> torch.Tensor:
    """Left-to-right fp32 sum of each row (numpy's cumsum is sequential; on the GPU, a loop over columns)."""
    if terms.device.type == "cpu":
        return torch.from_numpy(np.cumsum(terms.numpy(), axis=1, dtype=np.float32)[:, -1].copy())
    acc = torch.zeros(terms.shape[0], dtype=torch.float32, device=terms.device)
    for j in range(terms.shape[1]):
        acc += terms[:, j]
    return acc


def _block_row_sums(terms: torch.Tensor) -> torch.Tensor:
    """256 strided sequential partial sums per row, then a pairwise tree over the partials."""
    rows, cols = terms.shape
    steps = math.ceil(cols / THREADS)
    padded = torch.nn.functional.pad(terms, (0, steps * THREADS - cols)).view(rows, steps, THREADS)
    acc = torch.zeros(rows, THREADS, dtype=torch.float32, device=terms.device)
    for s in range(steps):
        acc += padded[:, s]
    width = THREADS
    while width > 1:
        width //= 2
        acc = acc[:, :width] + acc[:, width:2 * width]
    return acc[:, 0]


def _row_values(task_id: TaskId, inputs: list[torch.Tensor],
                row_sum: Callable[[torch.Tensor], torch.Tensor]) -> torch.Tensor:
    """fp32 per-row loss contributions (before the batch mean), computed chunk by chunk."""
    a, b = inputs
    rows, cols = a.shape
    chunks = row_chunks(rows, cols)
    out = []
    for start in chunks:
        sl = slice(start, start + chunks.step)
        if task_id == TaskId.KL_DIV:
            out.append(row_sum(_kl_terms(a[sl], b[sl])))
        else:
            x = a[sl]
            m = x.max(dim=1, keepdim=True).values
            lse = m.squeeze(1) + torch.log(row_sum(torch.exp(x - m)))
            out.append(lse - x.gather(1, b[sl, None]).squeeze(1))
    return torch.cat(out)


def _sequential_mean(values: torch.Tensor) -> float:
    """Row values added one at a time into one fp32 accumulator, then divided by the batch."""
    total = np.cumsum(values.cpu().numpy(), dtype=np.float32)[-1]
    return float(np.float32(total) / np.float32(values.numel()))


def implementations(task: Task, compile_too: bool) -> dict[str, Callable[[list[torch.Tensor]], float]]:
    model = task.model_cls()
    impls: dict[str, Callable[[list[torch.Tensor]], float]] = {
        "torch": lambda inputs: float(model(*inputs)),
        "block": lambda inputs: _sequential_mean(_row_values(task.id, inputs, _block_row_sums)),
        "naive": lambda inputs: _sequential_mean(_row_values(task.id, inputs, _sequential_row_sums)),
    }
    if compile_too:
        compiled = torch.compile(model)
        impls["compile"] = lambda inputs: float(compiled(*inputs))
    return impls


# --- gradients (training variants) ------------------------------------------------------------------

def _gradient_impls(task: Task) -> dict[str, Callable[[list[torch.Tensor], float], torch.Tensor]]:
    """Honest fp32 gradients of the training task's loss, each scaled by `scale` (the incoming gradient)."""
    model = task.model_cls()
    kl = task.training.forward_task == TaskId.KL_DIV

    def autograd(inputs: list[torch.Tensor], scale: float) -> torch.Tensor:
        leaf = inputs[0].detach().requires_grad_(True)
        with torch.enable_grad():
            model(leaf, inputs[1]).backward(torch.tensor(scale, dtype=torch.float32, device=leaf.device))
        return leaf.grad

    def kl_closed(inputs: list[torch.Tensor], scale: float) -> torch.Tensor:
        p, t = inputs
        return -(t / p) * torch.tensor(scale / p.shape[0], dtype=torch.float32)

    def kl_logspace(inputs: list[torch.Tensor], scale: float) -> torch.Tensor:
        p, t = inputs
        return -torch.exp(torch.log(t) - torch.log(p)) * torch.tensor(scale / p.shape[0], dtype=torch.float32)

    def _onehot(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return torch.zeros_like(x).scatter_(1, y[:, None], 1.0)

    def ce_closed(inputs: list[torch.Tensor], scale: float) -> torch.Tensor:
        x, y = inputs
        e = torch.exp(x - x.max(dim=1, keepdim=True).values)
        return (e / _block_row_sums(e)[:, None] - _onehot(x, y)) * torch.tensor(scale / x.shape[0], dtype=torch.float32)

    def ce_lse(inputs: list[torch.Tensor], scale: float) -> torch.Tensor:
        x, y = inputs
        m = x.max(dim=1, keepdim=True).values
        lse = m + torch.log(_block_row_sums(torch.exp(x - m)))[:, None]
        return (torch.exp(x - lse) - _onehot(x, y)) * torch.tensor(scale / x.shape[0], dtype=torch.float32)

    if kl:
        return {"torch": autograd, "closed": kl_closed, "logspace": kl_logspace}
    return {"torch": autograd, "closed": ce_closed, "lse": ce_lse}


def measure_gradient(task: Task, shape: tuple[int, int], seeds: int, device: torch.device) -> None:
    from reference.training import full_gradient, grad_output_scale

    impls = _gradient_impls(task)
    tol = task.training.gradient_tolerance
    worst = {name: [0.0, 0.0, 0.0] for name in impls}  # max rel (|truth| >= 1e-3), max abs, max ratio
    started = time.perf_counter()
    for distribution in task.distributions:
        for seed in range(seeds):
            inputs = task.make_inputs(shape, distribution, 1000 + seed, device)
            scale = grad_output_scale(1000 + seed)
            truth = full_gradient(task, inputs) * shape[0]  # per-row units
            for name, fn in impls.items():
                got = fn(inputs, scale).double() * (shape[0] / scale)
                err = (got - truth).abs()
                big = truth.abs() >= 1e-3
                rel = float((err[big] / truth.abs()[big]).max()) if bool(big.any()) else 0.0
                magnitude = task.training.gradient_magnitude(inputs, 0, shape[0], truth)
                ratio = float((err / (tol.atol + tol.rtol * magnitude)).max())
                w = worst[name]
                worst[name] = [max(w[0], rel), max(w[1], float(err.max())), max(w[2], ratio)]
            del inputs, truth
    cells = " | ".join(f"{w[0]:.1e} / {w[1]:.1e} (x{w[2]:.2f})" for w in worst.values())
    print(f"| {task.id.value} | {shape[0]}x{shape[1]} | all | {' / '.join(impls)} | {cells} |"
          f"  ({time.perf_counter() - started:.1f} s)", flush=True)


# --- the table --------------------------------------------------------------------------------------

def parse_shape(text: str) -> tuple[int, int]:
    rows, cols = text.lower().split("x")
    return int(rows), int(cols)


def default_shapes(task: Task, device: torch.device) -> list[tuple[int, int]]:
    if device.type == "cuda":
        return [task.official_shape, *task.extra_shapes]
    larger = {TaskId.KL_DIV: (2048, 16384), TaskId.CROSS_ENTROPY: (8192, 4096)}[task.id]
    return [task.cpu_shape, larger]


def measure(task: Task, shape: tuple[int, int], seeds: int, device: torch.device, compile_too: bool) -> None:
    impls = implementations(task, compile_too)
    for distribution in task.distributions:
        losses: list[float] = []
        worst = {name: (0.0, 0.0) for name in impls}
        started = time.perf_counter()
        for seed in range(seeds):
            inputs = task.make_inputs(shape, distribution, 1000 + seed, device)
            truth = float(task.ground_truth(inputs))
            losses.append(truth)
            for name, fn in impls.items():
                err = abs(fn(inputs) - truth)
                rel = err / abs(truth) if truth else math.inf
                worst[name] = (max(worst[name][0], rel), max(worst[name][1], err))
            del inputs
        mean = statistics.fmean(losses)
        spread = statistics.stdev(losses) / abs(mean) if len(losses) > 1 and mean else float("nan")
        cells = " | ".join(f"{worst[n][0]:.1e} / {worst[n][1]:.1e}" for n in impls)
        print(f"| {task.id.value} | {shape[0]}x{shape[1]} | {distribution} | {mean:.6g} | {spread:.1e} | {cells} |"
              f"  ({time.perf_counter() - started:.1f} s)", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--seeds", type=int, default=3)
    forward_ids = [t.value for t in TaskId if not t.value.endswith("_train")]
    parser.add_argument("--tasks", nargs="*", default=forward_ids, choices=forward_ids)
    parser.add_argument("--kl-shapes", nargs="*", type=parse_shape, help="e.g. 2048x16384 (default: by device)")
    parser.add_argument("--ce-shapes", nargs="*", type=parse_shape, help="e.g. 8192x4096 (default: by device)")
    parser.add_argument("--compile", action="store_true", help="also measure torch.compile of the reference")
    parser.add_argument("--gradient", action="store_true", help="the training variants' gradients (see above)")
    args = parser.parse_args()
    if args.gradient:
        return main_gradient(args)

    device = torch.device(args.device)
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"
    print(f"device {name}, torch {torch.__version__}, {args.seeds} seeds; cells: max rel error / max abs error vs fp64")
    impl_names = ["torch", "block", "naive"] + (["compile"] if args.compile else [])
    print("| task | shape | distribution | loss (fp64) | seed spread | " + " | ".join(impl_names) + " |")
    print("|---|---|---|---|---|" + "---|" * len(impl_names))
    chosen = {TaskId.KL_DIV: args.kl_shapes, TaskId.CROSS_ENTROPY: args.ce_shapes}
    for task in all_tasks():
        if task.id.value not in args.tasks or task.training is not None:
            continue
        with torch.no_grad():
            for shape in chosen[task.id] or default_shapes(task, device):
                measure(task, shape, args.seeds, device, args.compile)


def main_gradient(args: argparse.Namespace) -> None:
    device = torch.device(args.device)
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"
    print(f"device {name}, torch {torch.__version__}, {args.seeds} seeds x every distribution; per-row units "
          "(batch * gradient / scale); cells: max rel error (|truth| >= 1e-3) / max abs error (x worst error "
          "over tolerance)")
    print("| task | shape | distributions | implementations | cells |\n|---|---|---|---|---|")
    chosen = {TaskId.KL_DIV: args.kl_shapes, TaskId.CROSS_ENTROPY: args.ce_shapes}
    for task in all_tasks():
        if task.training is None or task.training.forward_task.value not in args.tasks:
            continue
        forward = next(t for t in all_tasks() if t.id == task.training.forward_task)
        for shape in chosen[forward.id] or default_shapes(forward, device):
            measure_gradient(task, shape, args.seeds, device)


if __name__ == "__main__":
    main()
