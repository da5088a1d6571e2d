"""veRL: `compute_score` functions for its reward managers and its asynchronous reward loop.

Point veRL's `custom_reward_function` at this file (`path`) and one of its functions (`name`):

    custom_reward_function.path=service/integrations/verl.py
    custom_reward_function.name=compute_score          # naive/prime managers: one sample per call
    custom_reward_function.name=compute_score_batch    # reward_model.reward_manager=batch
    custom_reward_function.name=compute_score_async    # the reward loop (awaited, samples concurrently)

with the judge in JUDGE_URL / JUDGE_API_KEY and the formula's parameters in `custom_reward_function.
reward_kwargs` (veRL passes them as keywords: `reward={"speedup_transform": "log"}`, `deadline_s`, ...).

Signatures followed (volcengine/verl, `verl/utils/reward_score/__init__.py::default_compute_score`,
`verl/workers/reward_manager/{naive,batch}.py`, and the reward loop of `verl/experimental/reward_loop`, 2025-12):
- `compute_score(data_source, solution_str, ground_truth, extra_info=None, **kwargs)`: the naive manager
  calls it per sample, in its own thread pool for the prime manager;
- `compute_score_batch(data_sources, solution_strs, ground_truths, extra_infos, **kwargs)`: the batch
  manager, once per batch;
- the reward loop awaits `compute_score(...)` when it is a coroutine function, with extra keywords
  (`reward_router_address`, `reward_model_tokenizer`) that are ignored here.

The task of a sample is `extra_info["task"]`, else `ground_truth` (a kernel task's "answer" is its reference
problem, named by its id), else `data_source` after a `kernel_judge/` prefix.
Each returns a dict, which veRL's managers read as `score` plus extra columns (`reward_extra_info`):
`status`, `infra_failure` (1.0 when the judge, not the kernel, failed: veRL needs a float, so such a sample
scores `failure_score`, 0.0 by default, and the flag and the warning log say that it is not the kernel's 0).
"""

from __future__ import annotations

import asyncio
import weakref
from collections.abc import Mapping, Sequence
from typing import Any

from service.integrations.scoring import KernelScorer, Score, run_sync

PREFIX = "kernel_judge/"

_SCORER_OPTIONS = ("url", "key", "task", "model", "reward", "deadline_s", "timeout_s", "max_concurrency",
                   "batch_size", "attempts", "backoff_s", "max_backoff_s")


def task_of(data_source: str | None, ground_truth: Any, extra_info: Mapping[str, Any] | None) -> str | None:
    if extra_info and extra_info.get("task"):
        return str(extra_info["task"])
    if isinstance(ground_truth, str) and ground_truth:
        return ground_truth
    if data_source and data_source.startswith(PREFIX):
        return data_source[len(PREFIX):]
    return None


def to_result(score: Score, failure_score: float = 0.0) -> dict[str, Any]:
    """The dict veRL records: `score` (a float, always), and its extra columns, the same keys every time
    (veRL's managers collect them into lists across the batch)."""
    value = score.reward if score.reward is not None else failure_score
    return {"score": float(value), "status": score.status or score.outcome.value,
            "infra_failure": 1.0 if score.infra_failure else 0.0,
            "speedup_eager": float(score.speedup_eager) if score.speedup_eager is not None else 0.0}


def _scorer(kwargs: Mapping[str, Any]) -> KernelScorer:
    return KernelScorer(**{k: v for k, v in kwargs.items() if k in _SCORER_OPTIONS})


async def compute_score_batch_async(data_sources: Sequence[str], solution_strs: Sequence[str],
                                    ground_truths: Sequence[Any], extra_infos: Sequence[Any] | None = None,
                                    failure_score: float = 0.0, **kwargs: Any) -> list[dict[str, Any]]:
    infos = list(extra_infos) if extra_infos is not None else [None] * len(solution_strs)
    tasks = [task_of(d, g, e) for d, g, e in zip(data_sources, ground_truths, infos)]
    scores = await _scorer(kwargs).score(list(solution_strs), tasks)
    return [to_result(s, failure_score) for s in scores]


def compute_score_batch(data_sources: Sequence[str], solution_strs: Sequence[str], ground_truths: Sequence[Any],
                        extra_infos: Sequence[Any] | None = None, **kwargs: Any) -> list[dict[str, Any]]:
    """For `reward_manager=batch`: the whole batch in one go, its requests concurrent."""
    return run_sync(lambda: compute_score_batch_async(data_sources, solution_strs, ground_truths, extra_infos,
                                                      **kwargs))


_GATES: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, asyncio.Semaphore] = weakref.WeakKeyDictionary()


async def compute_score_async(data_source: str, solution_str: str, ground_truth: Any,
                              extra_info: Mapping[str, Any] | None = None, **kwargs: Any) -> dict[str, Any]:
    """For the reward loop, which awaits one call per sample and runs many at once: the calls of one event
    loop share one limit of `max_concurrency` requests in flight (4 by default)."""
    loop = asyncio.get_running_loop()
    gate = _GATES.setdefault(loop, asyncio.Semaphore(int(kwargs.get("max_concurrency", 4))))
    async with gate:
        return (await compute_score_batch_async([data_source], [solution_str], [ground_truth], [extra_info],
                                                **kwargs))[0]


def compute_score(data_source: str, solution_str: str, ground_truth: Any,
                  extra_info: Mapping[str, Any] | None = None, **kwargs: Any) -> dict[str, Any]:
    """For the naive and prime managers: one sample, blocking."""
    return compute_score_batch([data_source], [solution_str], [ground_truth], [extra_info], **kwargs)[0]
