"""The training variants (kl_div_train, cross_entropy_train): what they share with the forward tasks, their fp64
gradient truth, the incoming gradient's scale, and the gradient tolerance (honest fp32 passes, cheats fail)."""

from __future__ import annotations

import struct

import pytest
import torch

from reference import Task, TaskId, all_tasks, get_task
from reference.training import SCALE_RANGE, full_gradient, grad_output_scale

from .conftest import CPU

TRAINING = [pytest.param(t, id=t.id.value) for t in all_tasks() if t.training is not None]
TRAINING_DISTRIBUTIONS = [pytest.param(t, d, id=f"{t.id.value}-{d}") for t in all_tasks() if t.training is not None
                          for d in t.distributions]


def _forward(task: Task) -> Task:
    return get_task(task.training.forward_task)


def test_both_training_variants_are_registered() -> None:
    ids = {t.id for t in all_tasks()}
    assert {TaskId.KL_DIV_TRAIN, TaskId.CROSS_ENTROPY_TRAIN} <= ids
    assert get_task("kl_div_train").training.forward_task is TaskId.KL_DIV
    assert get_task("cross_entropy_train").training.forward_task is TaskId.CROSS_ENTROPY
    assert get_task("kl_div").training is None and get_task("cross_entropy").training is None


@pytest.mark.parametrize("task", TRAINING)
def test_same_problem_shapes_distributions_and_loss_as_the_forward_task(task: Task) -> None:
    fwd = _forward(task)
    for name in ("problem_source", "model_cls", "official_shape", "cpu_shape", "extra_shapes", "cpu_extra_shapes",
                 "distributions", "timing_distributions", "make_inputs", "ground_truth", "tolerance", "output_shape",
                 "output_dtype", "requires_custom_kernel", "kernelbench_id"):
        assert getattr(task, name) == getattr(fwd, name), name
    assert "planted" in task.distributions and task.timed_distributions() == ("planted",)


@pytest.mark.parametrize("task", TRAINING)
def test_forbidden_operators_carry_over(task: Task) -> None:
    fwd = _forward(task)
    assert fwd.forbidden_aten_ops <= task.forbidden_aten_ops
    assert fwd.forbidden_python_names <= task.forbidden_python_names
    if task.id is TaskId.CROSS_ENTROPY_TRAIN:
        assert {"aten::_log_softmax_backward_data", "aten::nll_loss_backward",
                "aten::_softmax_backward_data"} <= task.forbidden_aten_ops
        assert "torch.ops.aten._log_softmax_backward_data" in task.forbidden_python_names


@pytest.mark.parametrize("task", TRAINING)
def test_speed_of_light_of_the_step_adds_the_gradient_write(task: Task) -> None:
    for shape in (task.official_shape, task.cpu_shape):
        rows, cols = shape
        assert task.min_bytes(shape) == _forward(task).min_bytes(shape) + rows * cols * 4
        assert task.training.forward_min_bytes(shape) == _forward(task).min_bytes(shape)


def test_cross_entropy_magnitude_adds_one_at_the_target_only() -> None:
    task = get_task("cross_entropy_train")
    inputs = task.make_inputs(task.cpu_shape, "dominant", 3, CPU)
    truth = full_gradient(task, inputs) * task.cpu_shape[0]
    magnitude = task.training.gradient_magnitude(inputs, 0, task.cpu_shape[0], truth.clone())
    extra = magnitude - truth.abs()
    assert torch.equal(extra.argmax(dim=1), inputs[1]) and torch.allclose(extra.sum(dim=1), torch.ones(128).double())
    kl = get_task("kl_div_train")
    kl_inputs = kl.make_inputs(kl.cpu_shape, "official", 3, CPU)
    kl_truth = full_gradient(kl, kl_inputs)
    assert torch.equal(kl.training.gradient_magnitude(kl_inputs, 0, 64, kl_truth), kl_truth.abs())


def test_grad_output_scale_is_deterministic_fp32_and_far_from_one() -> None:
    scales = [grad_output_scale(seed) for seed in range(400)]
    assert scales == [grad_output_scale(seed) for seed in range(400)]
    assert all(SCALE_RANGE[0] <= abs(s) < SCALE_RANGE[1] for s in scales)
    assert all(struct.unpack("f", struct.pack("f", s))[0] == s for s in scales), "must be exact in fp32"
    assert any(s < 0 for s in scales) and any(s > 0 for s in scales)
    assert len(set(scales)) > 390


@pytest.mark.parametrize(("task", "distribution"), TRAINING_DISTRIBUTIONS)
def test_gradient_truth_is_fp64_autograd_of_the_reference(task: Task, distribution: str) -> None:
    """The closed forms equal autograd of the verbatim Model run in fp64 on the same inputs."""
    for shape in (task.cpu_shape, task.cpu_extra_shapes[0]):
        inputs = task.make_inputs(shape, distribution, 5, CPU)
        truth = full_gradient(task, inputs)
        assert truth.dtype == torch.float64 and tuple(truth.shape) == shape
        leaf = inputs[0].double().requires_grad_(True)
        other = inputs[1].double() if inputs[1].is_floating_point() else inputs[1]
        task.model_cls()(leaf, other).backward()
        assert torch.allclose(truth, leaf.grad, rtol=1e-12, atol=0.0)
        # chunked rows agree with the whole
        rows = shape[0]
        halves = torch.cat([task.training.gradient_truth(inputs, 0, rows // 2),
                            task.training.gradient_truth(inputs, rows // 2, rows)])
        assert torch.equal(halves, truth)


def _ratio(task: Task, inputs: list[torch.Tensor], got: torch.Tensor, truth: torch.Tensor, scale: float) -> float:
    """Worst |error| / (atol + rtol * magnitude) in per-row units (batch * gradient / scale): <= 1 passes."""
    rows = truth.shape[0]
    tol = task.training.gradient_tolerance
    magnitude = task.training.gradient_magnitude(inputs, 0, rows, truth * rows)
    err = (got.double() * (rows / scale) - truth * rows).abs()
    return float((err / (tol.atol + tol.rtol * magnitude)).max())


@pytest.mark.parametrize(("task", "distribution"), TRAINING_DISTRIBUTIONS)
def test_honest_fp32_gradient_passes_and_cheats_fail(task: Task, distribution: str) -> None:
    for seed in (11, 12):
        inputs = task.make_inputs(task.cpu_shape, distribution, seed, CPU)
        scale = grad_output_scale(seed)
        truth = full_gradient(task, inputs)
        leaf = inputs[0].detach().clone().requires_grad_(True)
        task.model_cls()(leaf, inputs[1]).backward(torch.tensor(scale))
        honest = leaf.grad
        assert _ratio(task, inputs, honest, truth, scale) < 0.2, "honest fp32 needs a wide margin"
        cheats = {
            "zero": torch.zeros_like(honest),
            "ignores grad_output": honest / scale,
            "half the rows": torch.cat([honest[::2], honest[::2]])[:honest.shape[0]],
            "other inputs (cached)": full_gradient(task, task.make_inputs(task.cpu_shape, distribution, seed + 100,
                                                                          CPU)).float() * scale,
            "wrong sign": -honest,
        }
        if distribution == "near_identical":  # its rows repeat one pair of rows on purpose: copies pass there
            del cheats["half the rows"]
        for name, cheat in cheats.items():
            assert _ratio(task, inputs, cheat, truth, scale) > 1, name
