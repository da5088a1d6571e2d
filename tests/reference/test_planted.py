"""The "planted" distribution defeats "recognise easy inputs, then skip work" (issue 7, item 2).

Each shortcut below is a plain torch function of the kind a reward-hacking kernel implements: read a
fixed fraction of the rows (strided or a prefix) and scale up, read half of each row, or use the
near-constant logsumexp of official cross_entropy rows. On official inputs at a realistic size they land
inside the task's tolerance (that is the attack, shown here so the test is not vacuous); on planted
inputs they miss it on (nearly) every seed, while honest fp32 computation stays inside; and the
cheap statistics a candidate could use to tell the two apart (a few sampled values or rows) are the
same for both on (nearly) every seed.

Seeds are fixed, so each count below is a deterministic fact about these seeds. A shortcut must miss on
at least 95% of them; on these seeds every shortcut misses on every one but "columns 1/2" of
cross_entropy at the CPU size (a lucky seed when the one hidden logit is low and in a column read).
Measured over more seeds (/tmp script, 2026-11-23): at 2048x4096 (kl_div) and 4096x4096 (cross_entropy)
no shortcut passed on 30 planted seeds except "rows 1/2" (1 of 30) and "prefix 3/4" (2 of 30) of
cross_entropy; on official inputs "rows 1/2" of kl_div and the constant logsumexp passed on 30 of 30.
"""

from __future__ import annotations

import functools
import math
from typing import Callable

import pytest
import torch

from reference import OFFICIAL, Task, TaskId, get_task

from .conftest import CPU, task_passes

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
    # to 64x the rows of the CPU size; the official sizes take minutes here) and has several planted rows.
    (TaskId.KL_DIV, "cpu"): ((64, 512), 30),
    (TaskId.KL_DIV, "large"): ((512, 4096), 8),
    (TaskId.CROSS_ENTROPY, "cpu"): ((128, 256), 30),
    (TaskId.CROSS_ENTROPY, "large"): ((1024, 4096), 8),
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
    result: dict = {"task": task, "size": size, "seeds": seeds, "honest_rel": {}, "passes": {}}
    for distribution in (OFFICIAL, PLANTED):
        passes = {name: 0 for name in cuts}
        worst = 0.0
        for seed in range(seeds):
            a, b = task.make_inputs(shape, distribution, seed, CPU)
            truth = float(task.ground_truth([a, b]))
            rows = _kl_rows(a, b) if task.id is TaskId.KL_DIV else _ce_rows(a, b)
            # Honest fp32: the reference Model, and row values added one by one into one fp32 scalar.
            sequential = float(torch.cumsum(rows, 0)[-1] / rows.shape[0])
            for honest in (float(model(a, b)), sequential):
                worst = max(worst, abs(honest - truth) / abs(truth))
            for name, cut in cuts.items():
                passes[name] += task_passes(task, cut(a, b), truth)
        result["honest_rel"][distribution] = worst
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
    task = outcomes["task"]
    for distribution, worst in outcomes["honest_rel"].items():
        # 10x margin under rtol: the planted rows do not make honest fp32 error approach the tolerance.
        assert worst < task.tolerance.rtol / 10, (distribution, worst)


@pytest.mark.parametrize("key", _size_params([k for k in SIZES if k[1] == "large"]))
def test_the_shortcuts_are_real_attacks_on_official_inputs(key: tuple[TaskId, str]) -> None:
    """Without planted rows, reading half the rows (and, for cross_entropy, the constant logsumexp) passes.
    (At the CPU size the official rows are too few for a sub-sample to be accurate.)"""
    outcomes = _outcomes(key)
    passes, seeds = outcomes["passes"][OFFICIAL], outcomes["seeds"]
    if outcomes["task"].id is TaskId.KL_DIV:
        assert min(passes["rows 1/2"], passes["prefix 1/2"]) >= seeds * 3 // 4, passes
    else:
        assert passes["constant logsumexp"] == passes["columns 1/2"] == seeds, passes


def _cheap_statistics(inputs: list[torch.Tensor], sampler: torch.Generator) -> torch.Tensor:
    """What a candidate can afford to look at: mean, std and max of 8 random rows of the first input, and
    of 4096 random values of each input (the candidate's own sampling, independent of the inputs)."""
    a, b = inputs
    rows = torch.randint(0, a.shape[0], (8,), generator=sampler)
    cells = torch.randint(0, a.numel(), (4096,), generator=sampler)
    picks = [a[rows], a.flatten()[cells], b.flatten()[cells[:4096] % b.numel()]]
    return torch.tensor([float(f(v.double())) for v in picks for f in (torch.mean, torch.std, torch.amax)])


@pytest.mark.parametrize("task_id", [TaskId.KL_DIV, TaskId.CROSS_ENTROPY], ids=lambda t: t.value)
def test_cheap_statistics_do_not_tell_planted_from_official(task_id: TaskId) -> None:
    """A detector calibrated on official inputs (flag when any cheap statistic leaves the range seen over
    16 official seeds) flags planted inputs hardly more often than official ones: it can only tell them
    apart when its sample happens to land in a planted row (k of R rows)."""
    task = get_task(task_id)
    shape, _ = SIZES[(task_id, "large")]
    sampler = torch.Generator().manual_seed(99)
    seen = torch.stack([_cheap_statistics(task.make_inputs(shape, OFFICIAL, 1000 + s, CPU), sampler)
                        for s in range(16)])
    low, high = seen.amin(0), seen.amax(0)

    def flagged(distribution: str, seed: int) -> bool:
        stats = _cheap_statistics(task.make_inputs(shape, distribution, seed, CPU), sampler)
        return bool(((stats < low) | (stats > high)).any())

    held_out = range(12)
    official = sum(flagged(OFFICIAL, s) for s in held_out)
    planted = sum(flagged(PLANTED, s) for s in held_out)
    assert planted <= official + 2, f"flagged {planted} planted vs {official} official inputs of {len(held_out)}"


@pytest.mark.parametrize("task_id", [TaskId.KL_DIV, TaskId.CROSS_ENTROPY], ids=lambda t: t.value)
def test_planted_rows_carry_a_large_share_of_the_loss(task_id: TaskId) -> None:
    """Against any shortcut that leaves rows out, the planted rows must matter: >= 10x the tolerance."""
    task = get_task(task_id)
    for shape, _ in (SIZES[(task_id, "cpu")], SIZES[(task_id, "large")]):
        for seed in range(5):
            official = float(task.ground_truth(task.make_inputs(shape, OFFICIAL, seed, CPU)))
            planted = float(task.ground_truth(task.make_inputs(shape, PLANTED, seed, CPU)))
            assert abs(planted - official) > 10 * task.tolerance.rtol * abs(planted), (shape, seed)


def test_timing_uses_only_the_planted_distribution() -> None:
    """The candidate can learn each timed call's distribution name, so only shortcut-proof ones are timed."""
    for task_id in TaskId:
        task = get_task(task_id)
        assert task.distributions[0] == OFFICIAL and PLANTED in task.distributions
        assert task.timed_distributions() == (PLANTED,)
