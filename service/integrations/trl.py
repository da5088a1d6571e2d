"""TRL: a reward function for `GRPOTrainer` (and RLOO, which calls reward functions the same way).

    from trl import GRPOConfig, GRPOTrainer
    from service.integrations.trl import KernelReward

    reward = KernelReward(task="kl_div", reward={"speedup_transform": "log"}, max_concurrency=4)
    trainer = GRPOTrainer(model=..., reward_funcs=[reward], train_dataset=dataset, args=GRPOConfig(...))

TRL (1.16, `GRPOTrainer._calculate_rewards`) calls `reward(prompts=..., completions=..., completion_ids=...,
**columns)` where the columns are the dataset's other fields, one value per completion (a `task` column
picks each completion's task), plus `trainer_state`, `log_extra` and `log_metric`. Completions are strings,
or lists of `{"role", "content"}` messages in the conversational format. An async reward function is run
on TRL's own event loop beside the others (`is_async_callable`): `AsyncKernelReward` is that form.

A completion the judge could not score (see `service.integrations.scoring`) gets None: TRL turns it into NaN,
leaves it out of its group's baseline and gives it no advantage, and warns when every reward function did so.
The count is logged as the metric `kernel_judge/infra_failures` and each completion's verdict status as the
completions-table column `kernel_judge_status`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from service.integrations.scoring import KernelScorer, Score


class AsyncKernelReward:
    """`async (prompts, completions, **kwargs) -> list[float | None]`: TRL awaits it on its event loop."""

    def __init__(self, scorer: KernelScorer | None = None, *, task_column: str = "task", **scorer_options: Any
                 ) -> None:
        self.scorer = scorer or KernelScorer(**scorer_options)
        self.task_column = task_column
        # TRL names each reward function's column in its logs after __name__.
        self.__name__ = "kernel_judge"

    async def __call__(self, prompts: Sequence[Any] | None = None, completions: Sequence[Any] = (),
                       **kwargs: Any) -> list[float | None]:
        scores = await self.scorer.score(completions, kwargs.get(self.task_column))
        return _report(scores, kwargs)


class KernelReward(AsyncKernelReward):
    """`(prompts, completions, **kwargs) -> list[float | None]`, blocking: the plain form TRL documents."""

    def __call__(self, prompts: Sequence[Any] | None = None, completions: Sequence[Any] = (),  # type: ignore[override]
                 **kwargs: Any) -> list[float | None]:
        scores = self.scorer.score_sync(completions, kwargs.get(self.task_column))
        return _report(scores, kwargs)


def _report(scores: list[Score], kwargs: dict[str, Any]) -> list[float | None]:
    log_metric: Callable[[str, float], None] | None = kwargs.get("log_metric")
    log_extra: Callable[[str, list], None] | None = kwargs.get("log_extra")
    if log_metric is not None:
        log_metric("kernel_judge/infra_failures", float(sum(s.infra_failure for s in scores)))
        log_metric("kernel_judge/correct", float(sum(s.status == "correct" for s in scores)))
    if log_extra is not None:
        log_extra("kernel_judge_status", [s.status or s.outcome.value for s in scores])
    return [s.reward for s in scores]
