"""A bound breached once is timed again before it is a verdict (sandbox/execution/timed_phase.py, `timing`).

The timing bounds read the host's clocks: a host loaded by other work (a burst's builds on the same cores) stretches
them as hidden work does. So a breach is timed once more, fresh: a candidate is refused only when the second timing
breaches too, and one whose second timing passes is ranked from that timing alone. Here the real judge runs an honest
CPU kernel, and the bounds are made to breach on the first reading only, or on every reading.
"""

from __future__ import annotations

from typing import Any, Callable

import pytest

from sandbox import Status, judge
from sandbox.execution import plausibility
from sandbox.execution.timed_phase import TimedPhase

from .conftest import CORPUS

HONEST = CORPUS / "cpu" / "kl_div_cpp_correct.py"
pytestmark = pytest.mark.slow  # two full CPU judgings


def _breaching(times: int) -> tuple[Callable[..., Any], dict[str, Any]]:
    """A `bounds_breach` that reports a breach on its first `times` readings, then what the real bounds say."""
    real = TimedPhase.bounds_breach
    seen = {"readings": 0, "batches": []}

    def bounds_breach(self: TimedPhase, timed: list) -> plausibility.Breach | None:
        seen["readings"] += 1
        seen["batches"].append(len(timed))
        if seen["readings"] <= times:
            return plausibility.Breach(rule="timing", diagnosis="claims far below what the judge measured", details={})
        return real(self, timed)

    return bounds_breach, seen


def test_a_breach_that_does_not_come_again_is_timed_again_and_ranked(judge_config, monkeypatch) -> None:
    bounds_breach, seen = _breaching(1)
    monkeypatch.setattr(TimedPhase, "bounds_breach", bounds_breach)
    verdict = judge("kl_div", HONEST.read_text(), "cpu", config=judge_config)
    assert verdict.status is Status.CORRECT, verdict.diagnosis
    assert seen["readings"] == 2, "read once, and once more after the second timing"
    clocks = verdict.details["timing"]["clocks"]
    assert clocks["retimed"] is True and clocks["first_breach"]["rule"] == "timing"
    assert verdict.performance is not None and verdict.performance.candidate.median_ms > 0


def test_a_breach_that_comes_again_is_the_candidates_verdict(judge_config, monkeypatch) -> None:
    bounds_breach, seen = _breaching(2)
    monkeypatch.setattr(TimedPhase, "bounds_breach", bounds_breach)
    verdict = judge("kl_div", HONEST.read_text(), "cpu", config=judge_config)
    assert verdict.status is Status.TAMPER_DETECTED, verdict.diagnosis
    assert verdict.diagnosis.endswith("(in two timings)") and verdict.details.get("rule") == "timing"
    assert seen["readings"] == 2 and all(n > 0 for n in seen["batches"])
    assert verdict.details["timing"]["clocks"]["first_breach"]["diagnosis"].startswith("claims far below")
