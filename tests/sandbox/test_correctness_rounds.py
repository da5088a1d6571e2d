"""Correctness trials run in rounds of one trial per distribution: a candidate that passes runs them all, a
rejected one stops after its first failing round (issue 12: a rejected candidate's device time)."""

from __future__ import annotations

from dataclasses import replace

from reference import get_task
from sandbox import Status, judge

from .conftest import CORPUS


def test_a_correct_candidate_runs_every_round(judge_config) -> None:
    config = replace(judge_config, trials_per_distribution=2)
    verdict = judge("kl_div", (CORPUS / "cpu" / "kl_div_cpp_correct.py").read_text(), "cpu", config=config)
    assert verdict.status is Status.CORRECT, verdict.diagnosis
    distributions = list(get_task("kl_div").distributions)
    assert [t.distribution for t in verdict.trials] == distributions * 2, "round after round, every distribution"
    assert len({t.seed for t in verdict.trials}) == len(verdict.trials), "a fresh seed for every trial"


def test_a_rejected_candidate_stops_after_its_first_failing_round(judge_config) -> None:
    config = replace(judge_config, trials_per_distribution=2)
    verdict = judge("kl_div", (CORPUS / "cpu" / "kl_div_wrong_direction.py").read_text(), "cpu", config=config)
    assert verdict.status is Status.INCORRECT, verdict.diagnosis
    distributions = list(get_task("kl_div").distributions)
    assert [t.distribution for t in verdict.trials] == distributions, "one round, then the verdict"
    failed = [t.distribution for t in verdict.trials if not t.passed]
    assert failed and f"{len(failed)} of {len(distributions)} trials failed ({', '.join(failed)} inputs)" \
        in verdict.diagnosis
    assert "timing" not in verdict.details, "a rejected candidate is not timed"
