"""Shared helpers for the reference tests: the tasks, the CPU device, the verbatim problems at any size."""

from __future__ import annotations

import pytest
import torch

from reference import Task, all_tasks

CPU = torch.device("cpu")


def forward_tasks() -> list[Task]:
    """The forward tasks. The training variants (kl_div_train, cross_entropy_train) share their inputs, loss
    truth, tolerance and problem text; tests/reference/test_training_tasks.py checks that and their gradients."""
    return [task for task in all_tasks() if task.training is None]


def task_params() -> list:
    return [pytest.param(task, id=task.id.value) for task in forward_tasks()]


def task_distribution_params() -> list:
    return [pytest.param(task, d, id=f"{task.id.value}-{d}") for task in forward_tasks() for d in task.distributions]


def verbatim_get_inputs(task: Task, shape: tuple[int, int]):
    """The problem module's own get_inputs, executed from problem_source with its sizes set to `shape`.

    get_inputs reads batch_size / input_shape / num_classes as module globals at call time, so
    overriding them in a fresh namespace runs the verbatim code at a CPU-friendly size.
    """
    namespace: dict = {}
    exec(compile(task.problem_source, f"<{task.id.value} problem>", "exec"), namespace)
    rows, cols = shape
    namespace.update(batch_size=rows, input_shape=(cols,), num_classes=cols)
    return namespace["get_inputs"]


def kernelbench_passes(value: float, truth: float) -> bool:
    """KernelBench's check for a scalar: allclose(atol=1e-2, rtol=1e-2)."""
    return abs(value - truth) <= 1e-2 + 1e-2 * abs(truth)


def task_passes(task: Task, value: float, truth: float) -> bool:
    """This task's check: |y - t| <= atol + rtol * |t| against fp64 truth."""
    return abs(value - truth) <= task.tolerance.atol + task.tolerance.rtol * abs(truth)
