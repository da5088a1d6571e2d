"""The reward formula (a pure function) and POST /v1/rewards: blocking until judged, and honouring its deadline."""

from __future__ import annotations

import math

import pytest
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
    # log of the compile speedup, weighted: 0.5 * ln(0.5) < 0: a slower-than-compile kernel loses some reward
    r = reward(summary(S.CORRECT, eager=3.0, compile_=0.5), p)
    assert r.value == pytest.approx(0.05 + 1.0 + 0.5 * math.log(0.5))
    assert reward(summary(None), p).value == -0.1 and reward(summary(S.SYSTEM_ERROR), p).value == 0.0
    assert reward(summary(S.TAMPER_DETECTED), p).value == -2.0
    excess = RewardParams(speedup_transform="excess", speedup_cap=2.0)  # TritonForge: speedup - 1 above 1x, capped
    assert reward(summary(S.CORRECT, eager=0.7), excess).terms["speedup"] == 0.0
    assert reward(summary(S.CORRECT, eager=5.0), excess).terms["speedup"] == pytest.approx(1.0)
    with pytest.raises(ValueError):
        RewardParams(speedup_transform="square")


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
