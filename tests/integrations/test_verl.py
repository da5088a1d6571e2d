"""veRL's reward functions against a real service and worker, called the way veRL's managers call them.

veRL is not installed beside TRL: verl 0.9.1 would keep torch but move transformers (5.24 to 5.10) and
huggingface_hub (2.4 to 1.33) backwards and bring Ray, so its callers are reproduced here from its source
(volcengine/verl, 2025-12): the naive manager
(`verl/workers/reward_manager/naive.py`: one `compute_score(data_source=, solution_str=, ground_truth=,
extra_info=)` per sample, the custom function's `reward_kwargs` merged into every call by
`verl/trainer/ppo/reward.py::get_custom_reward_fn`, a dict's
`score` taken as the reward and every key appended to `reward_extra_info`), the batch manager
(`batch.py`: `compute_score(data_sources=, solution_strs=, ground_truths=, extra_infos=)`), and the reward
loop (`verl/experimental/reward_loop`: `await compute_score(...)` per sample under `asyncio.wait_for`, with
`reward_router_address` and `reward_model_tokenizer` among the keywords).
"""

from __future__ import annotations

import asyncio
import functools
import inspect
from collections import defaultdict

import pytest

from service.integrations import verl
from tests.integrations.conftest import COMPLETION_OF_CORRECT, HACK, PROSE
from tests.service.conftest import free_port

SAMPLES = [  # (data_source, solution_str, ground_truth, extra_info) as a veRL parquet row gives them
    ("kernel_judge/kl_div", COMPLETION_OF_CORRECT, None, {"num_turns": None}),
    ("kernelbench", HACK, "kl_div", {}),
    ("kernelbench", PROSE, "unused", {"task": "kl_div"}),
]


def _naive_manager(compute_score, reward_kwargs: dict) -> tuple[list[float], dict[str, list]]:
    """NaiveRewardManager.__call__'s scoring loop, without the token bookkeeping."""
    fn = functools.partial(compute_score, **reward_kwargs)
    rewards, extra = [], defaultdict(list)
    for data_source, solution_str, ground_truth, extra_info in SAMPLES:
        score = fn(data_source=data_source, solution_str=solution_str, ground_truth=ground_truth,
                   extra_info=extra_info)
        rewards.append(score["score"] if isinstance(score, dict) else score)
        for key, value in (score.items() if isinstance(score, dict) else ()):
            extra[key].append(value)
    return rewards, extra


def test_the_signatures_are_verls():
    assert list(inspect.signature(verl.compute_score).parameters)[:4] == [
        "data_source", "solution_str", "ground_truth", "extra_info"]
    assert list(inspect.signature(verl.compute_score_batch).parameters)[:4] == [
        "data_sources", "solution_strs", "ground_truths", "extra_infos"]
    assert inspect.iscoroutinefunction(verl.compute_score_async)
    assert verl.task_of("kernel_judge/cross_entropy", None, None) == "cross_entropy"
    assert verl.task_of("x", "kl_div", {"task": "cross_entropy"}) == "cross_entropy"
    assert verl.task_of("openai/gsm8k", None, {}) is None


def test_an_outage_scores_the_failure_score_and_says_so():
    rewards, extra = _naive_manager(verl.compute_score, {"url": f"http://127.0.0.1:{free_port()}", "attempts": 1,
                                                         "failure_score": -0.1})
    assert rewards == [-0.1, -0.1, -0.1]
    assert extra["infra_failure"] == [1.0, 1.0, 1.0] and extra["status"] == ["unavailable"] * 3


@pytest.mark.slow
@pytest.mark.timeout(1500)  # the first judged kernel is built on a shared 2-core machine: minutes under load
def test_naive_batch_and_async_managers_get_the_judges_rewards(judge):
    kwargs = {"url": judge.url, "key": judge.key, "deadline_s": 600}
    rewards, extra = _naive_manager(verl.compute_score, kwargs)
    assert rewards[0] > 0.4 and rewards[1:] == [-1.0, 0.0]
    assert extra["status"] == ["correct", "policy_violation", "compile_error"]
    assert extra["infra_failure"] == [0.0, 0.0, 0.0] and extra["speedup_eager"][0] > 0
    assert set(extra) == {"score", "status", "infra_failure", "speedup_eager"}  # one list per key, all full

    columns = [list(c) for c in zip(*SAMPLES)]
    batch = verl.compute_score_batch(data_sources=columns[0], solution_strs=columns[1], ground_truths=columns[2],
                                     extra_infos=columns[3], reward={"hack_penalty": -3.0}, **kwargs)
    # each call judges its completions again: the correct kernel's speedup is timed anew, the shaping applied
    assert batch[0]["score"] > 0.4 and [b["score"] for b in batch[1:]] == [-3.0, 0.0]

    async def reward_loop() -> list[dict]:
        async def single(row: tuple) -> dict:
            data_source, solution_str, ground_truth, extra_info = row
            return await asyncio.wait_for(verl.compute_score_async(
                data_source=data_source, solution_str=solution_str, ground_truth=ground_truth,
                extra_info=extra_info, reward_router_address=None, reward_model_tokenizer=None,
                max_concurrency=2, **kwargs), timeout=600)

        return await asyncio.gather(*(single(row) for row in SAMPLES))

    looped = asyncio.run(reward_loop())
    assert looped[0]["status"] == "correct" and [r["score"] for r in looped[1:]] == [-1.0, 0.0]
