"""The training variants in the sandbox: the parent's gradient check (row projections on weights drawn after the
step, sampled rows elementwise), the protocol messages, and a real judged step with its report.

The corpus (tests/corpus/cpu/*_train_*, tests/corpus/hostile/cpu/t*) is judged by tests/sandbox/test_corpus.py;
here the pieces it rests on are checked directly, and one verdict's training report in detail.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from reference import get_task
from reference.training import full_gradient, grad_output_scale
from sandbox import Status, judge
from sandbox.execution import plausibility
from sandbox import protocol as msg
from sandbox.execution import training
from sandbox.execution.timing import batch_size
from sandbox.child.training import has_custom_function
from sandbox.shared.projection import project_rows, projection_weights

from .conftest import CORPUS

CPU = torch.device("cpu")


def _report(task_name: str, grad: torch.Tensor, truth: training.GradientTruth) -> tuple[msg.GradCheckReply, list]:
    """What an honest child would send for `grad` (the same helpers the child runs)."""
    weights = projection_weights(grad.shape[1], truth.weight_seed, CPU)
    reply = msg.GradCheckReply(op="grad_check", ok=True, dtype="float32", shape=list(grad.shape))
    rows = grad[torch.tensor(truth.rows, dtype=torch.int64)].contiguous()
    return reply, [project_rows(grad, weights).numpy().tobytes(), rows.view(-1).view(torch.uint8).numpy().tobytes()]


def _honest(task_name: str, inputs: list[torch.Tensor], scale: float) -> torch.Tensor:
    task = get_task(task_name)
    leaf = inputs[0].detach().clone().requires_grad_(True)
    task.model_cls()(leaf, inputs[1]).backward(torch.tensor(scale))
    return leaf.grad


@pytest.mark.parametrize("task_name", ["kl_div_train", "cross_entropy_train"])
@pytest.mark.parametrize("distribution", ["official", "planted"])
def test_honest_fp32_gradient_passes_the_check(task_name: str, distribution: str) -> None:
    task = get_task(task_name)
    for seed in range(4):
        inputs = task.make_inputs(task.cpu_shape, distribution, seed, CPU)
        truth = training.gradient_truth(task, inputs, seed)
        assert truth.rows == list(range(task.cpu_shape[0])), "CPU sizes read every row back"
        reply, payloads = _report(task_name, _honest(task_name, inputs, truth.scale), truth)
        result = training.check_gradient(task, task.cpu_shape, truth, reply, payloads)
        assert result.passed, result.message
        assert result.max_rel_error is not None and result.max_rel_error < 1e-3


@pytest.mark.parametrize("task_name", ["kl_div_train", "cross_entropy_train"])
def test_rows_outside_the_sample_are_caught_by_their_projection(task_name: str,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    """With a row sample (as at official sizes), a row wrong by a tiny amount outside the sample still fails.

    The row is the unsampled one with the largest gradient. A row's projection bound is the sum of its
    elements' tolerances, so a row whose whole gradient is within a few tolerances of zero (planted inputs
    have such rows) can be zeroed unseen when it is not sampled: an error of that row's own tiny size."""
    task = get_task(task_name)
    rows, cols = task.cpu_shape
    monkeypatch.setattr(training, "GRAD_SAMPLE_BYTES", 4 * cols * 4)
    inputs = task.make_inputs(task.cpu_shape, "planted", 3, CPU)
    truth = training.gradient_truth(task, inputs, 3)
    assert len(truth.rows) == 4
    honest = _honest(task_name, inputs, truth.scale)
    outside = max((r for r in range(rows) if r not in truth.rows), key=lambda r: float(honest[r].abs().sum()))
    for name, bad in {
        "zero row": honest.clone().index_fill_(0, torch.tensor([outside]), 0.0),
        "row copied from its neighbour": honest.clone().index_copy_(
            0, torch.tensor([outside]), honest[[(outside + 1) % rows]]),
        "one entry off by 10% of the row's largest": _nudge(honest, outside, truth),
    }.items():
        reply, payloads = _report(task_name, bad, truth)
        result = training.check_gradient(task, task.cpu_shape, truth, reply, payloads)
        assert not result.passed, name
        assert f"first row {outside}" in result.message, result.message


def _nudge(grad: torch.Tensor, row: int, truth: training.GradientTruth) -> torch.Tensor:
    """One entry of `row` off by 10% of the row's largest |gradient|, at a column whose weight is not tiny.

    A row's projection bound is the sum of its elementwise tolerances, ~cols times looser than one entry's:
    it catches errors of a row's scale (zeroed, copied, cached, unscaled, sub-sampled rows), while errors
    near one entry's tolerance are caught elementwise in the sampled rows (all rows at the CPU sizes)."""
    bad = grad.clone()
    weights = projection_weights(grad.shape[1], truth.weight_seed, CPU)
    column = int(weights.abs().argmax())
    bad[row, column] += 0.1 * bad[row].abs().max()
    return bad


def test_wrong_dtype_shape_nan_and_unscaled_gradients_fail() -> None:
    task = get_task("cross_entropy_train")
    inputs = task.make_inputs(task.cpu_shape, "official", 1, CPU)
    truth = training.gradient_truth(task, inputs, 1)
    honest = _honest(task.id.value, inputs, truth.scale)
    reply, payloads = _report(task.id.value, honest, truth)
    wrong_dtype = reply.model_copy(update={"dtype": "float64"})
    assert "dtype" in training.check_gradient(task, task.cpu_shape, truth, wrong_dtype, payloads).message
    wrong_shape = reply.model_copy(update={"shape": [task.cpu_shape[1], task.cpu_shape[0]]})
    assert "shape" in training.check_gradient(task, task.cpu_shape, truth, wrong_shape, payloads).message
    nan = honest.clone()
    nan[5, 7] = float("nan")
    result = training.check_gradient(task, task.cpu_shape, truth, *_report(task.id.value, nan, truth))
    assert not result.passed and "NaN" in result.message
    unscaled = honest / truth.scale
    assert not training.check_gradient(task, task.cpu_shape, truth, *_report(task.id.value, unscaled, truth)).passed
    with pytest.raises(ValueError):
        training.check_gradient(task, task.cpu_shape, truth, reply, payloads[:1])
    with pytest.raises(ValueError):
        training.check_gradient(task, task.cpu_shape, truth, reply, [payloads[0][:-8], payloads[1]])


def test_weights_and_row_sample_are_fresh_per_step() -> None:
    task = get_task("kl_div_train")
    inputs = task.make_inputs(task.cpu_shape, "official", 2, CPU)
    a, b = training.gradient_truth(task, inputs, 2), training.gradient_truth(task, inputs, 2)
    assert a.weight_seed != b.weight_seed and not torch.equal(a.projections, b.projections)
    assert a.scale == b.scale == grad_output_scale(2)
    rows = training.sample_rows(16384, 16384)
    assert len(rows) == training.GRAD_SAMPLE_BYTES // (16384 * 4) and rows != training.sample_rows(16384, 16384)
    w = projection_weights(1000, 99, CPU)
    assert torch.equal(w, projection_weights(1000, 99, CPU)) and w.dtype == torch.float64
    assert float(w.min()) >= -1.0 and float(w.max()) < 1.0


def test_projection_truth_matches_the_full_gradient() -> None:
    task = get_task("cross_entropy_train")
    inputs = task.make_inputs(task.cpu_shape, "dominant", 4, CPU)
    truth = training.gradient_truth(task, inputs, 4)
    full = full_gradient(task, inputs) * task.cpu_shape[0]
    weights = projection_weights(task.cpu_shape[1], truth.weight_seed, CPU)
    assert torch.allclose(truth.projections, full @ weights, rtol=1e-12, atol=1e-12)
    assert torch.equal(truth.sampled, full[truth.rows])


def test_custom_function_is_found_in_the_graph() -> None:
    class Square(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x):  # noqa: ANN001, ANN205 - torch's protocol
            ctx.save_for_backward(x)
            return (x * x).sum()

        @staticmethod
        def backward(ctx, g):  # noqa: ANN001, ANN205 - torch's protocol
            (x,) = ctx.saved_tensors
            return 2 * x * g

    x = torch.rand(3, requires_grad=True)
    assert has_custom_function(Square.apply(x) * 2 + 1)
    assert not has_custom_function((x * x).sum())


def test_protocol_carries_the_training_messages() -> None:
    cmd = msg.parse_command({"op": "grad_check", "rows": [0, 5], "weight_seed": 7})
    assert isinstance(cmd, msg.GradCheck) and cmd.rows == [0, 5]
    with pytest.raises(Exception):  # noqa: B017, PT011 - pydantic's ValidationError
        msg.parse_command({"op": "grad_check", "rows": [-1], "weight_seed": 7})
    assert msg.parse_command({"op": "arm", "calls": 2, "shape": [2, 3], "forward_only": True}).forward_only
    bad = {"op": "grad_check", "ok": True, "dtype": "float32", "shape": [2, 3], "extra": 1}
    with pytest.raises(msg.ProtocolError):
        msg.parse_reply(bad, msg.GradCheckReply)


def test_a_fused_candidate_is_judged_with_its_training_report(judge_config, monkeypatch) -> None:
    """The fused candidate's backward only scales a saved gradient (no candidate code runs there): allowed
    because the gradient came from its custom Function. The verdict reports the step and the forward.

    Steps are timed three to a batch, as on a GPU (a CPU's batches are one call: sandbox/execution/timing.py), so that
    the batch path of the training judge (each step's gradient checked after its batch) runs here too.
    The timing bound is switched off for it: a forced CPU batch runs its cache flushes between calls inside
    the round trip, in the CPU time the bound reads but not in the claims (a real CPU batch is one call, its
    flush outside), which on a loaded 2-core host put honest claims at 0.41 of the floor once."""
    monkeypatch.setattr(training.TrainingExecution, "batch_size", lambda self: 3)
    monkeypatch.setitem(plausibility.MIN_CLAIM_FRACTION_TRAINING, "cpu", 0.0)
    path = CORPUS / "cpu" / "kl_div_train_cpp_fused.py"
    verdict = judge("kl_div_train", Path(path).read_text(), "cpu", config=judge_config)
    assert verdict.status is Status.CORRECT, verdict.diagnosis
    report = verdict.details["training"]
    assert report["custom_autograd_function"] is True and report["backward_runs_candidate_code"] is False
    timed = verdict.details["timing"]["timed_calls"] + verdict.details["timing"]["warmup_calls"]
    # every trial and every timed step (warm-up included) had its gradient checked; forward-only calls have none
    # (extra shapes come after this report, and are checked too: all passed)
    assert report["gradient_checks"] == len(verdict.trials) + timed
    assert verdict.extra_shapes and all(e.passed for e in verdict.extra_shapes)
    assert report["gradient_max_rel_error"] < 1e-4
    assert verdict.details["timing"]["batch_size"] == 3 and verdict.details["timing"]["timed_calls"] % 3 == 0
    # the forward alone is timed in the same batches, until precise or the step's planned calls
    assert report["forward"]["median_ms"] > 0 and report["forward"]["reps"] % 3 == 0
    assert report["forward"]["reps"] <= verdict.details["timing"]["planned_calls"] + 2
    assert set(report["forward_baselines"]) == {"eager", "compile"} and set(report["forward_speedups"]) == {
        "eager", "compile"}
    assert report["forward_min_bytes"] < verdict.performance.min_bytes
    assert "liger" in report["baselines_skipped"]
    perf = verdict.performance
    assert set(perf.baselines) == {"eager", "compile"}
    assert perf.min_bytes == get_task("kl_div_train").min_bytes(get_task("kl_div_train").cpu_shape)


def test_a_training_batch_holds_several_official_steps_on_a_large_card() -> None:
    """A step holds its inputs and two gradients (just over 4 GiB for kl_div_train): under the forward's 8 GiB,
    one step per batch left each step's own host work in the timed window. A third of an 80 GB card holds six;
    a 24 GB card keeps the forward's budget."""
    cuda = torch.device("cuda")  # batch_size reads only the device's type: no GPU is touched here
    task = get_task("kl_div_train")
    rows, cols = task.official_shape
    held = task.training.forward_min_bytes(task.official_shape) + 2 * rows * cols * 4
    assert batch_size(cuda, held, training.training_armed_bytes(80 * 10**9)) == 6
    assert batch_size(cuda, held, training.training_armed_bytes(24 * 10**9)) == batch_size(cuda, held) == 1
