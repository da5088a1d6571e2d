"""fp64 ground truth equals the reference Model evaluated in float64, chunked or not."""

from __future__ import annotations

import math

import pytest
import torch

import reference.task
from reference import Task, get_task

from .conftest import CPU, task_distribution_params


def _model_fp64(task: Task, inputs: list[torch.Tensor]) -> torch.Tensor:
    return task.model_cls()(*(x.double() if x.is_floating_point() else x for x in inputs))


@pytest.mark.parametrize(("task", "distribution"), task_distribution_params())
def test_ground_truth_equals_model_in_fp64(task: Task, distribution: str) -> None:
    for shape in (task.cpu_shape, *task.cpu_extra_shapes):
        inputs = task.make_inputs(shape, distribution, 5, CPU)
        truth = task.ground_truth(inputs)
        assert truth.dtype == torch.float64 and truth.shape == () and truth.device == CPU
        expected = _model_fp64(task, inputs)
        assert torch.isfinite(truth)
        assert abs(float(truth) - float(expected)) <= 1e-12 * abs(float(expected)) + 1e-15


@pytest.mark.parametrize(("task", "distribution"), task_distribution_params())
def test_chunking_does_not_change_the_result(task: Task, distribution: str, monkeypatch: pytest.MonkeyPatch) -> None:
    inputs = task.make_inputs(task.cpu_shape, distribution, 9, CPU)
    whole = float(task.ground_truth(inputs))
    # 1000 elements per chunk: one or a few rows at a time, with a ragged last chunk.
    monkeypatch.setattr(reference.task, "ROW_CHUNK_ELEMENTS", 1000)
    assert len(reference.task.row_chunks(*task.cpu_shape)) > 10
    assert abs(float(task.ground_truth(inputs)) - whole) <= 1e-13 * abs(whole)


def test_kl_ground_truth_uses_the_xlogy_convention_for_zero_targets() -> None:
    # Outside the generated domain, but the semantics must still be the reference's: 0 * log 0 = 0.
    task = get_task("kl_div")
    p = torch.tensor([[0.25, 0.25, 0.5], [0.125, 0.375, 0.5]], dtype=torch.float32)  # exact in fp32
    t = torch.tensor([[0.0, 0.5, 0.5], [1.0, 0.0, 0.0]], dtype=torch.float32)
    truth = float(task.ground_truth([p, t]))
    expected = float(_model_fp64(task, [p, t]))
    by_hand = (0.5 * math.log(2.0) + 0.5 * math.log(1.0) + 1.0 * math.log(8.0)) / 2  # zero targets add 0
    assert truth == pytest.approx(expected, rel=1e-14) and truth == pytest.approx(float(by_hand), rel=1e-14)


def test_ce_ground_truth_by_hand() -> None:
    task = get_task("cross_entropy")
    x = torch.tensor([[0.0, 0.0], [70.0, -70.0]], dtype=torch.float32)
    y = torch.tensor([1, 1])
    # row 0: log 2; row 1: 140 + log(1 + e^-140)
    assert float(task.ground_truth([x, y])) == pytest.approx((0.6931471805599453 + 140.0) / 2, rel=1e-15)
