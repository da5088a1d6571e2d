"""Inputs where precision shortcuts break and the reference does not (issue 25, point 4).

- cross_entropy "large_logits": every row hundreds away from 0. Without subtracting the row's maximum, exp
  overflows (or underflows to 0) in fp32 and the loss is inf or NaN; eager PyTorch and the fp64 truth are
  finite and agree.
- kl_div "near_identical": targets and predictions a relative 0.03%..1% apart, a loss ~1e-5. Logarithms
  rounded to bf16 miss it by tens of tolerances; fp32 logarithms, in every honest arrangement, pass.
- kl_div "sparse": targets with exact zeros, predictions down to ~1e-36. The reference's 0 * log 0 is 0
  (eager PyTorch agrees, finite); 0 * log 0 computed as NaN, a clamped logarithm and half precision fail.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from reference import get_task

from .conftest import CPU, task_passes

SEEDS = (0, 1, 2)


def _ratio(task, value: float, truth: float) -> float:
    """|value - truth| over the tolerance: under 1 passes (inf for NaN or inf)."""
    if not np.isfinite(value):
        return float("inf")
    return abs(value - truth) / (task.tolerance.atol + task.tolerance.rtol * abs(truth))


# --- cross_entropy: large logits -------------------------------------------------------------------------------

def _ce_no_max(x: torch.Tensor, y: torch.Tensor) -> float:
    """logsumexp as log(sum(exp(x))) in fp32, the max never subtracted."""
    return float((x.exp().sum(1).log() - x.gather(1, y[:, None]).squeeze(1)).mean())


def _ce_max_subtracted(x: torch.Tensor, y: torch.Tensor) -> float:
    m = x.amax(1, keepdim=True)
    return float(((x - m).exp().sum(1).log() + m.squeeze(1) - x.gather(1, y[:, None]).squeeze(1)).mean())


@pytest.mark.parametrize("shape", [(128, 256), (1000, 37), (4, 8195), (1024, 4096)], ids=str)
def test_large_logits_break_a_missing_max_subtraction_and_not_the_reference(shape) -> None:
    task = get_task("cross_entropy")
    model = task.model_cls()
    for seed in SEEDS:
        x, y = task.make_inputs(shape, "large_logits", seed, CPU)
        assert bool(((x.amin(1) > 88.8) | (x.amax(1) < -104.0)).all()), "every row outside exp's fp32 range"
        truth = float(task.ground_truth([x, y]))
        assert np.isfinite(truth) and 1.0 < truth < 60.0
        assert task_passes(task, float(model(x, y)), truth), "eager PyTorch (log_softmax subtracts the max)"
        assert _ratio(task, _ce_max_subtracted(x, y), truth) < 0.1
        assert not np.isfinite(_ce_no_max(x, y)), "without the max subtraction fp32 gives inf or NaN"


def test_no_other_distribution_catches_a_missing_max_subtraction() -> None:
    """Why large_logits exists: on every other distribution (|logits| <= 80) the same fp32 code passes."""
    task = get_task("cross_entropy")
    for distribution in task.distributions:
        if distribution == "large_logits":
            continue
        x, y = task.make_inputs((1024, 4096), distribution, 0, CPU)
        assert _ratio(task, _ce_no_max(x, y), float(task.ground_truth([x, y]))) < 1, distribution


# --- kl_div: nearly identical inputs ---------------------------------------------------------------------------

def _bf16(x: torch.Tensor) -> torch.Tensor:
    return x.bfloat16().float()


def _kl_with_logs(p: torch.Tensor, t: torch.Tensor, log) -> float:
    """sum(t * (log t - log p)) / batch: the terms in fp32, their sum in fp64 (the accumulation is not at issue)."""
    return float((t * (log(t) - log(p))).double().sum() / p.shape[0])


KL_WAYS = {
    # honest fp32
    "log t - log p": lambda p, t: _kl_with_logs(p, t, torch.log),
    "log(t / p)": lambda p, t: float((t * torch.log(t / p)).double().sum() / p.shape[0]),
    "fp32 row sums": lambda p, t: float(torch.from_numpy(np.cumsum((t * (t.log() - p.log())).numpy(), axis=1,
                                                                   dtype=np.float32)[:, -1].copy()).sum() / p.shape[0]),
}
KL_BF16 = {
    # logarithms accurate to bf16 (8 significant bits): rounded results, or a bf16 log (both rounded)
    "bf16 logs": lambda p, t: _kl_with_logs(p, t, lambda x: _bf16(torch.log(x))),
    "bf16 inputs and logs": lambda p, t: _kl_with_logs(p, t, lambda x: _bf16(torch.log(_bf16(x)))),
}


@pytest.mark.slow  # every honest arrangement and rounding, every shape and seed
def test_near_identical_inputs_fail_bf16_logarithms_and_pass_fp32() -> None:
    """Every honest fp32 arrangement passes with a wide margin on every shape and seed. Logarithms rounded to bf16
    err by a random amount (a sum of roundings of either sign): far outside in the median, and outside on
    nearly every seed; so is 0."""
    task = get_task("kl_div")
    model = task.model_cls()
    bf16 = []
    for shape in [(64, 512), (33, 1023), (4, 8195), (1000, 37), (512, 8192)]:
        for seed in (0, 1, 2, 3):
            p, t = task.make_inputs(shape, "near_identical", seed, CPU)
            truth = float(task.ground_truth([p, t]))
            assert 4e-6 < truth < 6e-5
            assert _ratio(task, float(model(p, t)), truth) < 0.25, ("eager PyTorch", shape, seed)
            for name, way in KL_WAYS.items():
                assert _ratio(task, way(p, t), truth) < 0.25, (name, shape, seed)
            bf16 += [_ratio(task, way(p, t), truth) for way in KL_BF16.values()]
            assert _ratio(task, 0.0, truth) > 10, ("returning 0", shape, seed)
    assert sorted(bf16)[len(bf16) // 2] > 100, sorted(bf16)
    assert sum(r > 10 for r in bf16) >= 0.9 * len(bf16), sorted(bf16)


def test_near_identical_rows_share_their_values_but_not_their_fp32_roundings() -> None:
    """Why the rows repeat one pair of rows, jittered: with independent rows, the bf16 errors of the rows would
    average out over the batch. The jitter is far under bf16's spacing and far over fp32's."""
    task = get_task("kl_div")
    p, t = task.make_inputs((64, 512), "near_identical", 0, CPU)
    log_t, first = t[1:].log(), t[0].log()
    assert float((log_t - first).abs().max()) < 1e-3
    assert float((_bf16(log_t) != _bf16(first)).double().mean()) < 0.02
    assert float((log_t != first).double().mean()) > 0.99


# --- kl_div: exact zeros and near-zero predictions ----------------------------------------------------------------

def _kl_unguarded(p: torch.Tensor, t: torch.Tensor) -> float:
    """t * (log t - log p) with no case for t = 0: 0 * -inf is NaN."""
    return float((t * (t.log() - p.log())).double().sum() / p.shape[0])


def _kl_clamped(p: torch.Tensor, t: torch.Tensor) -> float:
    """log(max(p, 1e-8)) "for stability", zero targets guarded."""
    return float(torch.where(t > 0, t * (t.log() - p.clamp_min(1e-8).log()), 0.0).double().sum() / p.shape[0])


def _kl_half(p: torch.Tensor, t: torch.Tensor) -> float:
    """fp16 inputs: predictions under 6e-8 become 0, their logarithm -inf."""
    h, g = p.half().float(), t.half().float()
    return float(torch.where(g > 0, g * (g.log() - h.log()), 0.0).double().sum() / p.shape[0])


@pytest.mark.parametrize("shape", [(64, 512), (1000, 37), (4, 8195),
                                   pytest.param((256, 4096), marks=pytest.mark.slow)], ids=str)  # the largest: seconds
def test_sparse_inputs_follow_the_reference_convention_and_break_shortcuts(shape) -> None:
    task = get_task("kl_div")
    model = task.model_cls()
    tiny = torch.finfo(torch.float32).tiny
    for seed in SEEDS:
        p, t = task.make_inputs(shape, "sparse", seed, CPU)
        assert float(p.min()) >= tiny and float(p.min()) < 1e-20, "near-zero predictions, all normal fp32"
        assert float((t == 0).double().mean()) > 0.05 and bool(((t > 0).sum(1) > 0).all())
        assert float(t[t > 0].min()) >= tiny, "no subnormal targets"
        assert bool(((t == 0) & (p < 1e-20)).any()) and bool(((t > 0) & (p < 1e-20)).any())
        truth = float(task.ground_truth([p, t]))
        eager = float(model(p, t))
        assert np.isfinite(truth) and np.isfinite(eager), "0 * log 0 is 0 in the reference, no NaN"
        assert float(model(p.double(), t.double())) == pytest.approx(truth, rel=1e-12)
        assert _ratio(task, eager, truth) < 0.1
        guarded = float(torch.where(t > 0, t * (t.log() - p.log()), 0.0).double().sum() / shape[0])
        assert _ratio(task, guarded, truth) < 0.1
        assert _ratio(task, _kl_unguarded(p, t), truth) == float("inf")
        assert _ratio(task, _kl_clamped(p, t), truth) > 100
        assert _ratio(task, _kl_half(p, t), truth) > 100
