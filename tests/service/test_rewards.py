"""The reward formula (a pure function) and POST /v1/rewards: blocking until judged, and honouring its deadline."""

from __future__ import annotations

import math

import pydantic
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from sqlalchemy import select

from sandbox.verdict import Status
from service.batches.rewards import RewardParams, VerdictSummary, reward
from service.db.models import Batch, Job
from service.queue.states import JobState
from tests.service.conftest import CORRECT_KL_DIV
from tests.service.test_batches import COMPLETION_OF_CORRECT, HOSTILE

S = Status


def summary(status: Status | None, *, fmt: bool = True, compiled: bool = True, eager: float | None = None,
            compile_: float | None = None) -> VerdictSummary:
    return VerdictSummary(status=status, format_ok=fmt, compiled=compiled, speedup_eager=eager,
                          speedup_compile=compile_)


def test_default_reward_is_kevin_style_with_a_compile_term_and_a_hack_penalty():
    # correct, 2.5x eager: compile 0.1 + correct 0.3 + speedup 2.5 (linear, Kevin-32B)
    r = reward(summary(S.CORRECT, eager=2.5, compile_=0.6))
    assert r.value == pytest.approx(2.9) and r.terms == pytest.approx(
        {"format": 0.0, "compile": 0.1, "correct": 0.3, "speedup": 2.5})
    assert reward(summary(S.INCORRECT)).value == pytest.approx(0.1)  # compiled, wrong
    assert reward(summary(S.COMPILE_ERROR, compiled=False)).value == 0.0
    assert reward(summary(S.COMPILE_ERROR, fmt=False, compiled=False)).terms == {"format": 0.0}
    for hack in (S.POLICY_VIOLATION, S.TAMPER_DETECTED):  # below any honest failure
        assert reward(summary(hack, eager=9.0)).value == -1.0 and reward(summary(hack)).terms == {"hack": -1.0}
    assert reward(summary(None)).value is None and reward(summary(S.SYSTEM_ERROR)).value is None
    assert reward(summary(S.CORRECT)).terms["speedup"] == 0.0  # correct but untimed: no speedup term
    assert reward(summary(S.CORRECT, eager=1e6)).terms["speedup"] == 10.0  # capped


def test_reward_parameters_change_the_formula():
    p = RewardParams(format=0.05, compile=0.0, correct=1.0, speedup_transform="log", speedup_baseline="compile",
                     speedup_weight=0.5, unfinished=-0.1, system_error=0.0, hack_penalty=-2.0)
    # log of the compile speedup, weighted, floored at 0: a slower-than-compile kernel keeps format + correct
    assert reward(summary(S.CORRECT, eager=3.0, compile_=0.5), p).value == pytest.approx(0.05 + 1.0)
    assert reward(summary(S.CORRECT, eager=0.5, compile_=3.0), p).value == pytest.approx(0.05 + 1.0 + 0.5 * math.log(3))
    assert reward(summary(None), p).value == -0.1 and reward(summary(S.SYSTEM_ERROR), p).value == 0.0
    assert reward(summary(S.TAMPER_DETECTED), p).value == -2.0
    excess = RewardParams(speedup_transform="excess", speedup_cap=2.0)  # TritonForge: speedup - 1 above 1x, capped
    assert reward(summary(S.CORRECT, eager=0.7), excess).terms["speedup"] == 0.0
    assert reward(summary(S.CORRECT, eager=5.0), excess).terms["speedup"] == pytest.approx(1.0)
    with pytest.raises(ValueError):
        RewardParams(speedup_transform="square")


TRANSFORMS = ("linear", "log", "excess")
BASELINES = ("eager", "compile")
SPEEDUPS = st.one_of(st.none(), st.just(math.nan), st.just(math.inf), st.just(0.0),
                     st.floats(min_value=1e-6, max_value=1e6, allow_nan=False))
NOT_NEGATIVE = ("format", "compile", "correct", "speedup_weight")
NOT_POSITIVE = ("no_format", "hack_penalty", "refused")
WEIGHTS = st.fixed_dictionaries({**{k: st.floats(min_value=0.0, max_value=5.0) for k in NOT_NEGATIVE},
                                 **{k: st.floats(min_value=-5.0, max_value=0.0) for k in NOT_POSITIVE}})


def _honest_failures_and_worse(p: RewardParams) -> dict[str, float]:
    """Every outcome a correct kernel must not score below, as the reward function gives it."""
    return {"incorrect, compiled": reward(summary(S.INCORRECT, eager=9.0, compile_=9.0), p).value,
            "runtime error": reward(summary(S.RUNTIME_ERROR, eager=9.0), p).value,
            "compile error": reward(summary(S.COMPILE_ERROR, compiled=False), p).value,
            "no code": reward(summary(S.COMPILE_ERROR, fmt=False, compiled=False), p).value,
            "policy violation": reward(summary(S.POLICY_VIOLATION, eager=9.0), p).value,
            "tamper detected": reward(summary(S.TAMPER_DETECTED, eager=9.0), p).value,
            "refused": p.refused}


@settings(max_examples=400, deadline=None)
@given(transform=st.sampled_from(TRANSFORMS), baseline=st.sampled_from(BASELINES),
       cap=st.floats(min_value=1e-3, max_value=1e4), eager=SPEEDUPS, compile_=SPEEDUPS, weights=WEIGHTS)
def test_a_correct_kernel_never_scores_below_a_failure_under_any_accepted_setting(transform, baseline, cap, eager,
                                                                                   compile_, weights):
    p = RewardParams(speedup_transform=transform, speedup_baseline=baseline, speedup_cap=cap, **weights)
    correct = reward(summary(S.CORRECT, eager=eager, compile_=compile_), p).value
    for what, value in _honest_failures_and_worse(p).items():
        assert correct >= value, (what, correct, value, p)


@settings(max_examples=200, deadline=None)
@given(weights=WEIGHTS, wrong=st.sets(st.sampled_from(NOT_NEGATIVE + NOT_POSITIVE), min_size=1),
       by=st.floats(min_value=1e-6, max_value=10.0))
def test_every_setting_outside_the_bounds_is_refused_by_name(weights, wrong, by):
    # Every other setting is accepted (the property above runs on them): the bounds are exactly what is refused.
    out = {k: (-by if k in NOT_NEGATIVE else by) if k in wrong else v for k, v in weights.items()}
    with pytest.raises(pydantic.ValidationError) as refused:
        RewardParams(**out)
    assert {e["loc"][0] for e in refused.value.errors()} == wrong


@pytest.mark.parametrize("transform", TRANSFORMS)
@pytest.mark.parametrize("baseline", BASELINES)
def test_every_documented_transform_keeps_a_slow_correct_kernel_above_every_failure(transform, baseline):
    # The documented settings with their defaults (0.3 for correct): a correct kernel is strictly above, at any speed.
    p = RewardParams(speedup_transform=transform, speedup_baseline=baseline)
    failures = _honest_failures_and_worse(p)
    for speedup in (1e-4, 0.01, 0.1, 0.5, 0.9, 1.0, 1.5, 3.0, 100.0):
        correct = reward(summary(S.CORRECT, eager=speedup, compile_=speedup), p)
        assert correct.terms["speedup"] >= 0.0
        assert correct.value > max(failures.values()), (speedup, correct, failures)
    # The case: log at 0.5x was 0.1 + 0.3 + ln 0.5 = -0.29, below no code (0.0).
    if transform == "log":
        assert reward(summary(S.CORRECT, eager=0.5, compile_=0.5), p).value == pytest.approx(0.4)


def test_settings_that_would_rank_a_failure_above_a_correct_kernel_are_a_422_that_says_why(client, auth):
    body = {"task": "kl_div", "deadline_s": 0.5, "completions": ["no code"]}
    for bad, named in (({"correct": -0.2}, "correct"), ({"no_format": 1.0}, "no_format"),
                       ({"hack_penalty": 0.5}, "hack_penalty"), ({"speedup_weight": -1.0}, "speedup_weight")):
        r = client.post("/v1/rewards", json={**body, "reward": bad}, headers=auth)
        assert r.status_code == 422 and named in r.text, (bad, r.text)


def test_the_deadline_is_honoured_and_refused_items_still_get_a_reward(client, auth, db):
    # No worker runs: nothing can finish, so the call must come back at its deadline, not hang.
    body = {"task": "kl_div", "deadline_s": 0.5, "model": "policy",
            "completions": [COMPLETION_OF_CORRECT, "", {"task": "cross_entropy", "completion": "no code here"},
                            {"task": "nope", "completion": "x"}],
            "reward": {"unfinished": -0.5}, "cancel_unfinished": True}
    r = client.post("/v1/rewards", json=body, headers=auth)
    assert r.status_code == 200, r.text
    out = r.json()
    assert out["complete"] is False and out["elapsed_s"] >= 0.5
    items = out["results"]
    assert [i["index"] for i in items] == [0, 1, 2, 3]
    assert [i["status"] for i in items] == [None, None, None, None]
    assert items[0]["reward"] == -0.5 and items[0]["submission_id"] and items[2]["reward"] == -0.5
    assert items[1]["submission_id"] is None and items[1]["reward"] == 0.0 and "empty" in items[1]["diagnosis"]
    assert "unknown task 'nope'" in items[3]["diagnosis"] and items[3]["terms"] == {"refused": 0.0}
    with db.transaction(read_only=True) as s:  # cancel_unfinished: the stale rollouts will not be judged
        assert s.scalar(select(Batch.kind).where(Batch.id == out["batch_id"])) == "rewards"
        assert {j.state for j in s.scalars(select(Job))} == {JobState.CANCELLED}
    bad = client.post("/v1/rewards", json={**body, "deadline_s": 4000}, headers=auth)
    assert bad.status_code == 422 and "deadline_s" in bad.text
    assert client.post("/v1/rewards", json={"completions": []}, headers=auth).status_code == 422
    assert client.post("/v1/rewards", json=body).status_code == 401


@pytest.mark.parametrize("db_url", ["postgresql"], indirect=True)
def test_rewards_block_until_a_real_worker_has_judged_every_completion(client, auth, spawn):
    worker = spawn("worker")
    body = {"task": "kl_div", "model": "policy", "deadline_s": 600,
            "completions": [COMPLETION_OF_CORRECT, CORRECT_KL_DIV.read_text(), f"```python\n{HOSTILE}```",
                            "I could not write the kernel."]}
    out = client.post("/v1/rewards", json=body, headers=auth).json()
    assert out["complete"] is True, out
    correct, duplicate, hostile, prose = out["results"]
    assert correct["status"] == "correct" and correct["speedup_eager"] > 0
    assert correct["reward"] == pytest.approx(0.1 + 0.3 + min(correct["speedup_eager"], 10.0))
    assert duplicate["duplicate_of"] == correct["submission_id"] and duplicate["reward"] == correct["reward"]
    assert hostile["status"] == "policy_violation" and hostile["reward"] == -1.0
    assert prose["status"] == "compile_error" and prose["reward"] == 0.0 and prose["terms"] == {"format": 0.0}
    assert worker.terminate() == 0
