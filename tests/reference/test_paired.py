"""Paired trials: the same targets with fresh predictions, so an answer must depend on every input (issue 25).

The paired distributions (`Task.paired_distributions`, "planted" for both tasks) draw the targets from one
sub-seed of the call's seed and the predictions (logits) from the other (`reference.task.sub_seeds`). The
correctness schedule (sandbox/execution/phases.py) gives each such trial a partner seed from `sharing_targets`: the
two trials share their targets bit for bit and nothing else. Their truths differ by far more than the
tolerance, so an answer that is a function of the targets alone (a kernel that reads the targets and guesses
the rest, or one that caches its answer under the targets) fails at least one of the two.
"""

from __future__ import annotations

import random

import pytest
import torch

from reference import Task, TaskId, all_tasks, get_task
from reference.task import SUB_SEED_BITS, sharing_targets, sub_seeds

from .conftest import CPU, task_params, task_passes

PAIRS = 12


def _pairs(seed: int = 2025) -> list[tuple[int, int]]:
    """Seeds as the schedule draws them (62 random bits), each with its partner."""
    rng = random.Random(seed)
    return [(s, sharing_targets(s, rng.getrandbits(62))) for s in (rng.getrandbits(62) for _ in range(PAIRS))]


def test_every_task_pairs_its_timed_distribution() -> None:
    for task in all_tasks():
        assert task.paired_distributions == ("planted",)
        assert set(task.paired_distributions) <= set(task.distributions)


def test_sharing_targets_keeps_the_targets_key_and_changes_the_predictions_key() -> None:
    for seed, partner in _pairs():
        assert 0 <= partner < 1 << (2 * SUB_SEED_BITS)
        assert sub_seeds(partner)[0] == sub_seeds(seed)[0]
        assert sub_seeds(partner)[1] != sub_seeds(seed)[1]
    # even when the fresh seed would repeat the predictions' key, the partner's differs
    assert sub_seeds(sharing_targets(5, 5))[1] != sub_seeds(5)[1]


def test_distinct_seeds_have_distinct_sub_seeds() -> None:
    """Small seeds (the tests') and seeds that differ only in the high half never share both keys, and the two
    keys of one seed never seed the same generator."""
    seen = set()
    for seed in [*range(200), *((k << SUB_SEED_BITS) | 7 for k in range(1, 200))]:
        targets, predictions = sub_seeds(seed)
        assert targets != predictions
        assert (targets, predictions) not in seen
        seen.add((targets, predictions))


@pytest.mark.parametrize("task", task_params())
def test_partners_share_the_targets_bit_for_bit_and_nothing_else(task: Task) -> None:
    for seed, partner in _pairs()[:4]:
        first = task.make_inputs(task.cpu_shape, "planted", seed, CPU)
        second = task.make_inputs(task.cpu_shape, "planted", partner, CPU)
        assert torch.equal(first[1], second[1]), "the targets must be the same"
        assert not torch.equal(first[0], second[0]), "the predictions must be fresh"


@pytest.mark.slow  # many pairs of inputs at a few thousand columns
@pytest.mark.parametrize("task", task_params())
def test_an_answer_from_the_targets_alone_fails_one_of_each_pair(task: Task) -> None:
    """The best any function of the targets can do for a pair is one value for both truths. The truths of a pair
    are independent draws given the targets, further apart than two tolerances on nearly every pair, so that
    value fails at least one; an answer cached under the targets (the first trial's, returned for the second)
    fails the second. (A pair can land close by chance: 1 of these 12 kl_div pairs is within 2 tolerances.)"""
    shape = (256, 2048)
    apart = []
    for seed, partner in _pairs():
        truths = [float(task.ground_truth(task.make_inputs(shape, "planted", s, CPU))) for s in (seed, partner)]
        tolerance = max(task.tolerance.atol + task.tolerance.rtol * abs(t) for t in truths)
        apart.append(abs(truths[0] - truths[1]) / (2 * tolerance))
    assert sum(a <= 1 for a in apart) <= 1, apart
    assert sorted(apart)[len(apart) // 2] > 20, apart


@pytest.mark.slow  # six pairs of planted inputs through an estimating kernel: seconds of CPU each
def test_the_issues_kernel_fails_planted_pairs() -> None:
    """The issue's kernel, all targets and 0.1% of the predictions (here: the rest as the read cells' mean ratio
    to the targets), fails both trials of nearly every pair."""
    task = get_task(TaskId.KL_DIV)
    shape = (256, 2048)
    gen = torch.Generator().manual_seed(7)
    failed = 0
    for seed, partner in _pairs()[:6]:
        answers = []
        for s in (seed, partner):
            p, t = task.make_inputs(shape, "planted", s, CPU)
            read = torch.rand(p.shape, generator=gen) < 0.001
            # all of t log t; t log p exact where read, else log p = log t + the read cells' mean log ratio
            ratio = float((p.log() - t.log())[read].double().mean())
            log_p = torch.where(read, p.log().double(), t.log().double() + ratio)
            answers.append(float((torch.xlogy(t.double(), t.double()) - t.double() * log_p).sum() / shape[0]))
            failed += not task_passes(task, answers[-1], float(task.ground_truth([p, t])))
    assert failed >= 11, failed
