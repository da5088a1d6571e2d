"""Correctness trials run in rounds of one trial per distribution: a candidate that passes runs them all, a
rejected one stops after its first failing round (issue 12: a rejected candidate's device time). A paired
distribution gets a second trial in each round, with the first's targets and fresh predictions (issue 25)."""

from __future__ import annotations

from dataclasses import replace

from reference import get_task
from reference.task import sub_seeds
from sandbox import Status, judge

from .conftest import CORPUS


def _round(task_id: str) -> list[str]:
    """One round's distributions in order, a paired one twice."""
    task = get_task(task_id)
    return [d for d in task.distributions for _ in range(2 if d in task.paired_distributions else 1)]


def test_a_correct_candidate_runs_every_round(judge_config) -> None:
    config = replace(judge_config, trials_per_distribution=2)
    verdict = judge("kl_div", (CORPUS / "cpu" / "kl_div_cpp_correct.py").read_text(), "cpu", config=config)
    assert verdict.status is Status.CORRECT, verdict.diagnosis
    assert [t.distribution for t in verdict.trials] == _round("kl_div") * 2, "round after round, every distribution"
    assert len({t.seed for t in verdict.trials}) == len(verdict.trials), "a fresh seed for every trial"
    for first, partner in zip(verdict.trials, verdict.trials[1:]):
        if first.distribution == partner.distribution == "planted":  # the pair: the same targets, fresh predictions
            assert sub_seeds(first.seed)[0] == sub_seeds(partner.seed)[0]
            assert sub_seeds(first.seed)[1] != sub_seeds(partner.seed)[1]


def test_a_rejected_candidate_stops_after_its_first_failing_round(judge_config) -> None:
    config = replace(judge_config, trials_per_distribution=2)
    verdict = judge("kl_div", (CORPUS / "cpu" / "kl_div_wrong_direction.py").read_text(), "cpu", config=config)
    assert verdict.status is Status.INCORRECT, verdict.diagnosis
    assert [t.distribution for t in verdict.trials] == _round("kl_div"), "one round, then the verdict"
    failed = list(dict.fromkeys(t.distribution for t in verdict.trials if not t.passed))
    count = sum(not t.passed for t in verdict.trials)
    assert failed and f"{count} of {len(verdict.trials)} trials failed ({', '.join(failed)} inputs)" \
        in verdict.diagnosis
    assert "timing" not in verdict.details, "a rejected candidate is not timed"
