"""Why the tolerance is what it is: honest fp32 passes, cheap wrong answers that KernelBench's 1e-2 lets
through (a constant cross entropy, the reversed KL direction) fail on the adversarial distributions."""

from __future__ import annotations

import statistics

import numpy as np
import pytest
import torch

from reference import OFFICIAL, Task, get_task

from .conftest import CPU, kernelbench_passes, task_distribution_params, task_passes

CE_LARGE = (2048, 4096)
"""A moderately large cross_entropy size that still generates in a fraction of a second on the CPU."""


@pytest.mark.parametrize(("task", "distribution"), task_distribution_params())
def test_honest_fp32_passes(task: Task, distribution: str) -> None:
    model = task.model_cls()
    for shape in (task.cpu_shape, *task.cpu_extra_shapes):
        for seed in (0, 1):
            inputs = task.make_inputs(shape, distribution, seed, CPU)
            truth = float(task.ground_truth(inputs))
            assert task_passes(task, float(model(*inputs)), truth)


def _sequential_fp32(task: Task, inputs: list[torch.Tensor]) -> float:
    """A naive honest kernel: fp32 terms, each row summed left to right, row values summed left to right."""
    a, b = inputs
    if task.id.value == "kl_div":
        terms = torch.where(b > 0, b * (b.log() - a.log()), 0.0)  # a zero target adds 0 ("sparse"), as in xlogy
        rows = np.cumsum(terms.numpy(), axis=1, dtype=np.float32)[:, -1]
    else:
        m = a.max(1, keepdim=True).values
        s = np.cumsum((a - m).exp().numpy(), axis=1, dtype=np.float32)[:, -1]
        rows = (m.squeeze(1) + torch.from_numpy(s).log() - a.gather(1, b[:, None]).squeeze(1)).numpy()
    return float(np.cumsum(rows, dtype=np.float32)[-1] / np.float32(len(rows)))


@pytest.mark.parametrize(("task", "distribution"), task_distribution_params())
def test_naive_sequential_fp32_passes(task: Task, distribution: str) -> None:
    inputs = task.make_inputs((512, 2048), distribution, 3, CPU)
    assert task_passes(task, _sequential_fp32(task, inputs), float(task.ground_truth(inputs)))


def _official_losses(shape: tuple[int, int], seeds: range) -> list[float]:
    task = get_task("cross_entropy")
    return [float(task.ground_truth(task.make_inputs(shape, OFFICIAL, s, CPU))) for s in seeds]


def test_constant_cross_entropy_passes_kernelbench_but_not_this_task() -> None:
    task = get_task("cross_entropy")
    small = _official_losses(task.cpu_shape, range(8))
    large = _official_losses(CE_LARGE, range(100, 105))
    small_spread = statistics.stdev(small) / statistics.fmean(small)
    large_spread = statistics.stdev(large) / statistics.fmean(large)
    # Measured: ~7e-3 at 128x256, ~1e-3 at 2048x4096, ~6e-4 at 8192x4096, ~2e-4 at the official 32768x4096.
    assert small_spread < 2e-2 and large_spread < 2e-3

    constant = statistics.fmean(large)
    # KernelBench's allclose(1e-2, 1e-2) accepts the constant on every official trial at the larger size.
    assert all(kernelbench_passes(constant, truth) for truth in large)
    # Ours rejects it on the adversarial distributions, for every seed, at both sizes.
    for shape in (task.cpu_shape, CE_LARGE):
        for seed in range(3):
            truths = (float(task.ground_truth(task.make_inputs(shape, d, seed, CPU))) for d in task.distributions[1:])
            assert any(not task_passes(task, constant, truth) for truth in truths), (shape, seed)
    # And already on some official trials: the seed-to-seed spread is larger than rtol.
    assert any(not task_passes(task, constant, truth) for truth in large)


def test_reversed_kl_passes_kernelbench_on_official_but_fails_adversarial() -> None:
    task = get_task("kl_div")
    model = task.model_cls()
    for seed in range(5):
        p, t = task.make_inputs(task.cpu_shape, OFFICIAL, seed, CPU)
        truth = float(task.ground_truth([p, t]))
        reversed_kl = float(model(t, p))  # KL(predictions || targets) instead of KL(targets || predictions)
        assert kernelbench_passes(reversed_kl, truth)
        # The official rows are nearly uniform: the two directions agree within ~2% relative.
        assert abs(reversed_kl - truth) <= 2e-2 * truth
    for seed in range(3):
        p, t = task.make_inputs(task.cpu_shape, "mismatched", seed, CPU)
        truth = float(task.ground_truth([p, t]))
        reversed_kl = float(model(t, p))
        assert not task_passes(task, reversed_kl, truth) and not kernelbench_passes(reversed_kl, truth)
