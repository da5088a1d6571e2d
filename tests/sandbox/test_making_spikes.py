"""A spike in the parent's reading of its own making relieves no candidate of its CPU time (sandbox/execution/
plausibility.py, `making_caps`; sandbox/execution/timed_phase.py, `call_runs`).

On the CPU the floor a claim is held to is the sandbox's CPU time for a batch less the parent's own making of the same
inputs, read on one of its threads just before the batch. Now and then that reading comes out many times longer than
the making (a fault, a reclaim, a virtual CPU's stolen time), while the child made the inputs at another moment. With
four timed batches, such readings took a forgery's hidden work off the floor on CI. Each call's making is capped by
every making the parent measured for the candidate; here the spikes are forced into the parent's readings.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch

from sandbox import Status, judge
from sandbox.execution import phases
from sandbox.execution.plausibility import MAKING_SPIKE_FACTOR, call_floor_ms, making_caps, timing_bound
from sandbox.execution.records import TimedCall

from .conftest import CORPUS
from .test_corpus import check_verdict

SPIKE_MS = 6.0
"""A spike of the size CI's figures imply (plausibility.MAKING_SPIKE_FACTOR), on a making of ~0.35-0.6 ms."""


def _batch(run_ms: float, makes_ms: tuple[float, ...], distributions: tuple[str, ...] = ("planted",)) -> TimedCall:
    return TimedCall(distribution=distributions[0], claim_ms=0.78, window_ms=9.0, run_ms=run_ms, hidden_work=False,
                     calls=len(makes_ms), distributions=distributions, own_makes_ms=makes_ms)


def test_a_making_is_capped_at_its_distributions_median_times_the_factor() -> None:
    caps = making_caps([("planted", 0.4), ("planted", 0.5), ("planted", 9.0), ("sparse", 0.8)])
    assert caps == {"planted": MAKING_SPIKE_FACTOR * 0.5, "sparse": MAKING_SPIKE_FACTOR * 0.8}
    assert _batch(7.0, (9.0,)).call_run_ms(caps) == pytest.approx(7.0 - MAKING_SPIKE_FACTOR * 0.5)
    assert _batch(7.0, (0.45,)).call_run_ms(caps) == pytest.approx(6.55), "a making under its cap is taken whole"
    two = _batch(7.0, (9.0, 0.8), ("planted", "sparse"))  # per call, each by its own distribution's cap
    assert two.call_run_ms(caps) == pytest.approx(7.0 - (MAKING_SPIKE_FACTOR * 0.5 + 0.8) / 2)
    assert _batch(7.0, (9.0,), ("official",)).call_run_ms(caps) == pytest.approx(-2.0), "no history: no cap"


def test_cis_four_batches_breach_once_their_two_spikes_are_capped() -> None:
    """CI's retiming that judged the forgery `correct` (2026-11-29): its recorded CPU times per call, with makings
    as a first timing has them and two of the retiming's spiked (the readings are not recorded, nor the first
    timing's CPU times: those here are near the retiming's, as its floor of 4.55 ms says they were)."""
    first = [_batch(r, (0.35,)) for r in (7.38, 7.05, 7.61, 7.22)]
    second = [_batch(r, (m,)) for r, m in zip((7.69, 7.19, 7.43, 7.47), (0.36, 0.35 + SPIKE_MS, 0.34 + SPIKE_MS, 0.37))]
    empty = [_batch(2.5, (1.0,)) for _ in range(8)]
    uncapped = {"planted": float("inf")}
    claims = [b.claim_ms for b in second]

    def bound(caps: dict[str, float]) -> object:
        runs, empty_runs = [b.call_run_ms(caps) for b in second], [c.call_run_ms(caps) for c in empty]
        return timing_bound(claims, [b.window_ms for b in second], runs, empty_runs, "cpu")

    assert bound(uncapped) is None, "the spikes take the forgery's work off the floor"
    caps = making_caps((d, ms) for b in (*empty, *first, *second) for d, ms in zip(b.distributions, b.own_makes_ms))
    floor = call_floor_ms([b.call_run_ms(caps) for b in second], [c.call_run_ms(caps) for c in empty])
    assert floor > 4.0 and bound(caps) is not None


def _spiking(every: int) -> tuple[Callable[..., Any], dict[str, int]]:
    """The parent's `made_on_device` with SPIKE_MS added to every `every`-th timed making it reads."""
    real, seen = phases.made_on_device, {"readings": 0, "spiked": 0}

    def made_on_device(make: Callable[[], list[torch.Tensor]], device: torch.device) -> tuple[list, float]:
        inputs, ms = real(make, device)
        seen["readings"] += 1
        if seen["readings"] % every == 0:
            seen["spiked"] += 1
            return inputs, ms + SPIKE_MS
        return inputs, ms
    return made_on_device, seen


@pytest.mark.slow
def test_the_dead_threads_forgery_is_caught_with_half_the_parents_readings_spiked(judge_config, monkeypatch) -> None:
    """Every second reading spiked: uncapped, the median batch loses half a spike of its CPU time, and the forgery's
    claims (a fifth of its work) pass the floor that is left; capped, it is refused as without spikes."""
    spiking, seen = _spiking(2)
    monkeypatch.setattr(phases, "made_on_device", spiking)
    path = CORPUS / "hostile" / "cpu" / "c13_dead_thread_work.py"
    verdict = judge("kl_div", path.read_text(encoding="utf-8"), "cpu", config=judge_config)
    check_verdict(path, verdict)
    assert seen["spiked"] >= 2 and verdict.status is Status.TAMPER_DETECTED
