"""The OpenEnv environment: a refinement episode against a real service and worker (the verdict's diagnosis
is the next observation, the episode ends on a correct kernel), the async twins, a hack ending the episode,
and an outage that yields no reward and does not use up a turn.

OpenEnv is not installed here (its server stack is not needed to check the contract); the contract is its
`Environment` (meta-pytorch/OpenEnv `src/openenv/core/env_server/interfaces.py`, `types.py`, 2025-12):
`reset(seed=None, episode_id=None, **kwargs)`, `step(action, timeout_s=None, **kwargs)`, their `*_async`
twins, the `state` property, and pydantic `Observation` (`done`, `reward`, `metadata`) refusing unknown fields.
"""

from __future__ import annotations

import asyncio
import inspect

import pydantic
import pytest

from service.integrations.openenv import KernelAction, KernelEnv, KernelObservation
from tests.integrations.conftest import COMPLETION_OF_CORRECT, HACK, WRONG
from tests.service.conftest import free_port


def test_the_contract_is_openenvs():
    for name, first in (("reset", ["seed", "episode_id", "kwargs"]), ("step", ["action", "timeout_s", "kwargs"])):
        assert list(inspect.signature(getattr(KernelEnv, name)).parameters)[1:] == first
        assert inspect.iscoroutinefunction(getattr(KernelEnv, f"{name}_async"))
    assert isinstance(KernelEnv.state, property)
    fields = KernelObservation.model_fields
    assert fields["done"].default is False and fields["reward"].default is None and "metadata" in fields
    with pytest.raises(pydantic.ValidationError):
        KernelAction(code="x", surprise=1)


def test_an_outage_gives_no_reward_and_keeps_the_turn():
    env = KernelEnv(task="kl_div", url=f"http://127.0.0.1:{free_port()}", key="k", attempts=1)
    env._prompts["kl_div"] = "write it"  # reset reads the prompt from the judge, which is down here
    env.reset(episode_id="e1")
    obs = env.step(KernelAction(code=COMPLETION_OF_CORRECT))
    assert obs.reward is None and obs.done is False and obs.metadata["infra_failure"] is True
    assert "could not score" in obs.feedback and obs.turn == 0
    assert env.state.turn == 0 and env.state.step_count == 1 and env.state.episode_id == "e1"


@pytest.mark.slow
@pytest.mark.timeout(1500)  # the first judged kernel is built on a shared 2-core machine: minutes under load
def test_a_refinement_episode_ends_on_a_correct_kernel(judge):
    env = KernelEnv(task="kl_div", max_turns=3, url=judge.url, key=judge.key, deadline_s=600)
    obs = env.reset()
    assert "ModelNew" in obs.prompt and obs.turn == 0 and not obs.done and obs.reward is None
    wrong = env.step(KernelAction(code=f"```python\n{WRONG}```"))
    assert wrong.status == "incorrect" and not wrong.done and wrong.turn == 1
    assert wrong.feedback.startswith("The judge rejected your kernel: incorrect.") and "trial" in wrong.feedback
    right = asyncio.run(env.step_async(KernelAction(code=COMPLETION_OF_CORRECT)))
    assert right.status == "correct" and right.done and right.reward > 0.4, right.feedback
    assert right.metadata["infra_failure"] is False and right.metadata["submission_id"]
    assert env.state.turn == 2 and env.state.best_reward == right.reward and env.state.last_status == "correct"
    # a new episode, and a hack ends it at once with the penalty
    obs = asyncio.run(env.reset_async(task="kl_div"))
    caught = env.step(KernelAction(code=HACK))
    assert caught.done and caught.reward == -1.0 and caught.status == "policy_violation"
    assert "Rule broken" in caught.feedback or "policy_violation" in caught.feedback
