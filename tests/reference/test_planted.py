"""The "planted" distribution defeats partial work: reading part of the inputs and estimating the rest (issues 7
and 25).

Two families of attacks, each as plain torch code of the kind a reward-hacking kernel implements:
- shortcuts that read a fixed part of both inputs: a fraction of the rows (strided or a prefix) scaled up,
  half of each row, or the near-constant logsumexp of official cross_entropy rows;
- the estimators of scripts/experiments/predictability.py, which read one input whole and a fraction of the
  other (rows, columns, random cells, or the cells the whole input marks) and estimate the rest from the
  distributions' laws (issue 25: on the old planted kl_div inputs, every hidden cell was marked by the
  targets, so all targets and ~0.1% of the predictions sufficed).
On official inputs some of them land inside the tolerance (the attack is real; shown so the tests are not
vacuous); on planted inputs they miss it on (nearly) every seed, while honest fp32 computation stays inside.

Seeds are fixed, so each count below is a deterministic fact about these seeds. A shortcut must miss on at
least 95% of them. The official-shape figures (64 seeds, the margins) are in docs/results/predictability-*.md.
"""

from __future__ import annotations

import functools
import math
import statistics
from typing import Callable

import pytest
import torch

from reference import OFFICIAL, Task, TaskId, get_task
from scripts.experiments import predictability

from .conftest import CPU, task_passes

pytestmark = pytest.mark.slow  # shortcuts and estimators simulated over many seeds: minutes of CPU

PLANTED = "planted"
Shortcut = Callable[[torch.Tensor, torch.Tensor], float]


def _kl_rows(p: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
    return (t * (t.log() - p.log())).sum(1)


def _ce_rows(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return x.logsumexp(1) - x.gather(1, y[:, None]).squeeze(1)


def _strided(rows: Callable, step: int) -> Shortcut:
    """Every `step`-th row, scaled to the batch: reads 1/step of the data."""
    return lambda a, b: float(rows(a[::step], b[::step]).mean())


def _prefix(rows: Callable, fraction: float) -> Shortcut:
    """The first `fraction` of the rows, scaled to the batch."""
    def shortcut(a: torch.Tensor, b: torch.Tensor) -> float:
        n = max(1, int(a.shape[0] * fraction))
        return float(rows(a[:n], b[:n]).mean())
    return shortcut


def _kl_half_columns(p: torch.Tensor, t: torch.Tensor) -> float:
    """Half of each row's entries, doubled."""
    return float(2 * _kl_rows(p[:, ::2], t[:, ::2]).mean())


def _ce_half_columns(x: torch.Tensor, y: torch.Tensor) -> float:
    """logsumexp from every other column (+ log 2), exact target logit."""
    return float((x[:, ::2].logsumexp(1) + math.log(2) - x.gather(1, y[:, None]).squeeze(1)).mean())


def _constant_lse(x: torch.Tensor, y: torch.Tensor) -> float:
    """The public trick: official rows' logsumexp is ~log(C (e - 1)) (8.85909 at C = 4096); read only x[i, y_i]."""
    return math.log(x.shape[1] * (math.e - 1.0)) - float(x.gather(1, y[:, None]).mean())


def shortcuts(task: Task) -> dict[str, Shortcut]:
    rows = _kl_rows if task.id is TaskId.KL_DIV else _ce_rows
    found = {"rows 1/64": _strided(rows, 64), "rows 1/8": _strided(rows, 8), "rows 1/2": _strided(rows, 2),
             "prefix 1/64": _prefix(rows, 1 / 64), "prefix 1/2": _prefix(rows, 1 / 2),
             "prefix 3/4": _prefix(rows, 3 / 4),
             "columns 1/2": _kl_half_columns if task.id is TaskId.KL_DIV else _ce_half_columns}
    if task.id is TaskId.CROSS_ENTROPY:
        found["constant logsumexp"] = _constant_lse
    return found


SIZES = {
    # (task, size name) -> (shape, seeds). "cpu" is the judged CPU size; "large" is moderately large (16x
    # to 64x the rows of the CPU size; the official sizes take minutes here) and has several planted cells.
    (TaskId.KL_DIV, "cpu"): ((64, 512), 30),
    (TaskId.KL_DIV, "large"): ((512, 4096), 20),
    (TaskId.CROSS_ENTROPY, "cpu"): ((128, 256), 30),
    (TaskId.CROSS_ENTROPY, "large"): ((1024, 4096), 20),
}


def lucky_allowed(seeds: int) -> int:
    """A shortcut must miss the tolerance on at least 95% of the seeds ("nearly every seed")."""
    return seeds // 20


def _size_params(sizes: list) -> list:
    return [pytest.param(key, id=f"{key[0].value}-{key[1]}") for key in sizes]


@functools.cache
def _outcomes(key: tuple[TaskId, str]) -> dict:
    """For every seed and both distributions: truth, honest fp32 results and every shortcut's pass/fail."""
    task_id, size = key
    task = get_task(task_id)
    shape, seeds = SIZES[key]
    cuts = shortcuts(task)
    model = task.model_cls()
    result: dict = {"task": task, "size": size, "seeds": seeds, "honest": {}, "passes": {}}
    for distribution in (OFFICIAL, PLANTED):
        passes = {name: 0 for name in cuts}
        worst = 0.0
        for seed in range(seeds):
            a, b = task.make_inputs(shape, distribution, seed, CPU)
            truth = float(task.ground_truth([a, b]))
            rows = _kl_rows(a, b) if task.id is TaskId.KL_DIV else _ce_rows(a, b)
            # Honest fp32: the reference Model, and row values added one by one into one fp32 scalar.
            sequential = float(torch.cumsum(rows, 0)[-1] / rows.shape[0])
            tolerance = task.tolerance.atol + task.tolerance.rtol * abs(truth)
            for honest in (float(model(a, b)), sequential):
                worst = max(worst, abs(honest - truth) / tolerance)
            for name, cut in cuts.items():
                passes[name] += task_passes(task, cut(a, b), truth)
        result["honest"][distribution] = worst
        result["passes"][distribution] = passes
    return result


@pytest.mark.parametrize("key", _size_params(list(SIZES)))
def test_every_shortcut_fails_on_planted_inputs(key: tuple[TaskId, str]) -> None:
    outcomes = _outcomes(key)
    allowed = lucky_allowed(outcomes["seeds"])
    lucky = {name: n for name, n in outcomes["passes"][PLANTED].items() if n > allowed}
    assert not lucky, f"shortcuts inside the tolerance on planted inputs ({outcomes['seeds']} seeds): {lucky}"


@pytest.mark.parametrize("key", _size_params(list(SIZES)))
def test_honest_fp32_stays_inside_the_tolerance(key: tuple[TaskId, str]) -> None:
    outcomes = _outcomes(key)
    for distribution, worst in outcomes["honest"].items():
        # 10x margin: the planted cells do not make honest fp32 error approach the tolerance.
        assert worst < 0.1, (distribution, worst)


@pytest.mark.parametrize("key", _size_params([k for k in SIZES if k[1] == "large"]))
def test_the_shortcuts_are_real_attacks_on_official_inputs(key: tuple[TaskId, str]) -> None:
    """Without planted cells, reading half the rows (and, for cross_entropy, the constant logsumexp) passes.
    (At the CPU size the official rows are too few for a sub-sample to be accurate.)"""
    outcomes = _outcomes(key)
    passes, seeds = outcomes["passes"][OFFICIAL], outcomes["seeds"]
    if outcomes["task"].id is TaskId.KL_DIV:
        assert min(passes["rows 1/2"], passes["prefix 1/2"]) >= seeds * 3 // 4, passes
    else:
        assert passes["constant logsumexp"] == passes["columns 1/2"] == seeds, passes


# --- one input whole, a fraction of the other ------------------------------------------------------------------

ESTIMATED = {
    # (task, input read whole) -> (shape, seeds): small, with the official per-row structure.
    ("kl_div", "targets"): ((128, 2048), 3),
    ("kl_div", "predictions"): ((128, 2048), 3),
    ("cross_entropy", "targets"): ((256, 2048), 3),
}


@functools.cache
def _estimated(key: tuple[str, str], distribution: str) -> dict:
    module = predictability
    shape, seeds = ESTIMATED[key]
    return module.simulate(module.READERS[key], distribution, shape, range(seeds), CPU, fractions=(0.001, 0.1))


@pytest.mark.parametrize("key", [pytest.param(k, id=f"{k[0]}-all-{k[1]}") for k in ESTIMATED])
def test_no_estimator_from_part_of_an_input_passes_planted_inputs(key: tuple[str, str]) -> None:
    """Every estimator, every way of reading 0.1% or 10% of an input: outside the tolerance on every seed, and
    the best of them at least 10x outside in the median (the official-shape margins, over 64 seeds, are in
    docs/results/predictability-*.md)."""
    results = _estimated(key, PLANTED)
    for (mode, fraction), by_name in results.items():
        best = min(statistics.median(values) for values in by_name.values())
        closest = min(min(values) for values in by_name.values())
        assert best > 10 and closest > 1, (mode, fraction, {n: [round(v, 2) for v in vs] for n, vs in by_name.items()})


@pytest.mark.parametrize("key", [pytest.param(k, id=f"{k[0]}-all-{k[1]}") for k in ESTIMATED
                                 if k[1] == "targets"])
def test_the_estimators_are_real_attacks_on_official_inputs(key: tuple[str, str]) -> None:
    """On official inputs some estimator passes most seeds while reading all targets and at most 10% of the
    other input: the law of the official inputs is what the planted cells break."""
    results = _estimated(key, OFFICIAL)
    passing = [(mode, fraction, name) for (mode, fraction), by_name in results.items()
               for name, values in by_name.items() if statistics.median(values) <= 1]
    assert passing, "no estimator passes official inputs: this test could not tell a defence from a weak attack"


# --- what the planted cells are -------------------------------------------------------------------------------

def _official_looking(p: torch.Tensor, t: torch.Tensor) -> bool:
    """The recogniser of tests/corpus/hostile/*/c2_recognise_official_then_sixty_fourth.py: 64 values of each
    input at fixed positions, inside official kl_div's range."""
    dim = p.shape[1]
    idx = torch.arange(64) * (p.numel() // 64)
    tv, pv = t.flatten()[idx] * dim, p.flatten()[idx] * dim
    return bool((tv > 0.5).all() and (tv < 1.7).all() and (pv > 0.3).all() and (pv < 3.0).all())


def test_kl_planted_values_look_official_to_a_value_range_test() -> None:
    """kl_div's planted inputs are official targets and predictions near them: a recogniser that checks sampled
    values against official ranges (and then takes a 1/64 row sample) is fooled, so the sample runs on planted
    inputs and misses. (They are not official in every statistic: the predictions follow the targets.)"""
    task = get_task("kl_div")
    looks = [_official_looking(*task.make_inputs((512, 4096), PLANTED, seed, CPU)) for seed in range(12)]
    assert sum(looks) >= 11, looks


def _cheap_statistics(inputs: list[torch.Tensor], sampler: torch.Generator) -> torch.Tensor:
    """What a candidate can afford to look at: mean, std and max of 8 random rows of the first input, and
    of 4096 random values of each input (the candidate's own sampling, independent of the inputs)."""
    a, b = inputs
    rows = torch.randint(0, a.shape[0], (8,), generator=sampler)
    cells = torch.randint(0, a.numel(), (4096,), generator=sampler)
    picks = [a[rows], a.flatten()[cells], b.flatten()[cells[:4096] % b.numel()]]
    return torch.tensor([float(f(v.double())) for v in picks for f in (torch.mean, torch.std, torch.amax)])


def test_cheap_statistics_do_not_tell_cross_entropy_planted_from_official() -> None:
    """A detector calibrated on official inputs (flag when any cheap statistic leaves the range seen over
    16 official seeds) flags planted inputs hardly more often than official ones: it can only tell them
    apart when its sample happens to land in a planted row (k of R rows)."""
    task = get_task(TaskId.CROSS_ENTROPY)
    shape, _ = SIZES[(TaskId.CROSS_ENTROPY, "large")]
    sampler = torch.Generator().manual_seed(99)
    seen = torch.stack([_cheap_statistics(task.make_inputs(shape, OFFICIAL, 1000 + s, CPU), sampler)
                        for s in range(16)])
    low, high = seen.amin(0), seen.amax(0)

    def flagged(distribution: str, seed: int) -> bool:
        stats = _cheap_statistics(task.make_inputs(shape, distribution, seed, CPU), sampler)
        return bool(((stats < low) | (stats > high)).any())

    # The detector can only tell the two apart when one of its 8 sampled rows is a planted one: at most
    # 8 * k / R = 1/8 of the inputs (k <= R / 64), 3 of 24; 4 leaves room for the official side's own chance.
    held_out = range(24)
    official = sum(flagged(OFFICIAL, s) for s in held_out)
    planted = sum(flagged(PLANTED, s) for s in held_out)
    assert planted <= official + 4, f"flagged {planted} planted vs {official} official inputs of {len(held_out)}"


def _hidden_loss(task: Task, inputs: list[torch.Tensor]) -> float:
    """The loss that the hidden cells add. kl_div: the terms t log(t / p) where log(t / p) is over 1 above its
    row's median (the predictions pushed down, the targets raised); cross_entropy: each planted row's loss
    above an official row's, logsumexp - log(C (e - 1))."""
    a, b = (x.double() if x.is_floating_point() else x for x in inputs)
    rows = a.shape[0]
    if task.id is TaskId.KL_DIV:
        r = b.log() - a.log()
        hidden = r > r.median(1, keepdim=True).values + 1
        return float((b * r)[hidden].sum() / rows)
    planted = a.amax(1) > 5
    return float((torch.logsumexp(a[planted], 1) - math.log(a.shape[1] * (math.e - 1.0))).sum() / rows)


@pytest.mark.parametrize("task_id", [TaskId.KL_DIV, TaskId.CROSS_ENTROPY], ids=lambda t: t.value)
def test_planted_cells_carry_a_large_share_of_the_loss(task_id: TaskId) -> None:
    """Against any estimate that misses part of them, the hidden cells must matter: >= 10x the tolerance (kl_div:
    and most of the loss, at the official width too)."""
    task = get_task(task_id)
    shapes = [SIZES[(task_id, "cpu")][0], SIZES[(task_id, "large")][0]]
    for shape in shapes + ([(64, 16384)] if task_id is TaskId.KL_DIV else []):
        large = 0
        for seed in range(5):
            inputs = task.make_inputs(shape, PLANTED, seed, CPU)
            truth = float(task.ground_truth(inputs))
            hidden = _hidden_loss(task, inputs)
            # A single planted cell of cross_entropy's CPU size can be low (its height is U(-2, 60) over the row's).
            large += hidden > 10 * (task.tolerance.atol + task.tolerance.rtol * truth)
            if task_id is TaskId.KL_DIV:
                assert hidden > truth / 2, (shape, seed, hidden / truth)
        assert large >= 4, (shape, large)


def test_timing_uses_only_the_planted_distribution() -> None:
    """The candidate can learn each timed call's distribution name, so only shortcut-proof ones are timed."""
    for task_id in TaskId:
        task = get_task(task_id)
        assert task.distributions[0] == OFFICIAL and PLANTED in task.distributions
        assert task.timed_distributions() == (PLANTED,)
