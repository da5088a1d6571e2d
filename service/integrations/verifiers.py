"""`verifiers` (0.4, `verifiers.v1`): a taskset of kernel tasks whose rubric is the judge.

    from service.integrations.verifiers import load_environment

    taskset = load_environment(tasks=["kl_div", "cross_entropy"], reward={"speedup_transform": "log"})

In verifiers 0.4 an environment package exports a `Taskset` (`__all__`), whose tasks carry their scoring as
`@vf.reward` / `@vf.metric` methods: the rubric. verifiers' runner (`vf-eval`, prime-rl) builds the `Env` from
the taskset's id, plays each task with a harness and model, then calls `Task.score(trace)`. Here each task's
prompt is the judge's own prompt for it (`GET /v1/tasks/{id}/prompt`), the reward `kernel_judge` is the reward
call's formula on the trace's last reply, and the metric `correct` comes from the same verdict.
To publish it as a hub package, re-export it from a top-level module (verifiers resolves a taskset id to an
importable top-level name): `from service.integrations.verifiers import KernelTaskset; __all__ = ["KernelTaskset"]`.

An attempt the judge could not score raises `JudgeUnavailable` from the reward: verifiers records it as the
rollout's error (`TaskError`, `trace.has_error`; "a bad rollout is data, not a crash", verifiers.v1.errors),
so the trainer drops the rollout instead of learning from a 0 the kernel did not earn.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import verifiers.v1 as vf
from pydantic import Field

from service.client import JudgeClient
from service.integrations.scoring import KernelScorer


class JudgeUnavailable(RuntimeError):
    """The judge did not score the attempt (system_error, its deadline, or no answer): not the kernel's fault."""


class KernelTaskData(vf.TaskData):
    kernel_task: str = Field(description="The judge's task id (kl_div, cross_entropy, ...).")


class KernelTaskConfig(vf.TaskConfig):
    url: str | None = None
    key: str | None = None
    reward: dict[str, Any] = Field(default_factory=dict, description="RewardParams overrides.")
    deadline_s: float = 600.0
    max_concurrency: int = 4
    attempts: int = 5
    model: str | None = None


_SCORERS: dict[str, KernelScorer] = {}


def _scorer(config: KernelTaskConfig) -> KernelScorer:
    """One scorer per configuration, shared by every task of a run (its settings, not a connection)."""
    key = config.model_dump_json()
    if key not in _SCORERS:
        _SCORERS[key] = KernelScorer(config.url, config.key, reward=config.reward, deadline_s=config.deadline_s,
                                     max_concurrency=config.max_concurrency, attempts=config.attempts,
                                     model=config.model)
    return _SCORERS[key]


class KernelTask(vf.Task[KernelTaskData, vf.State, KernelTaskConfig]):
    async def _verdict(self, task: KernelTaskData, trace: vf.Trace) -> dict[str, Any]:
        """The judge's answer for this trace, kept in `trace.info["kernel_judge"]` (JSON, so it travels with
        the trace): verifiers runs the metrics, then the rewards, and both read one verdict."""
        if "kernel_judge" not in trace.info:
            (score,) = await _scorer(self.config).score([trace.last_reply], task.kernel_task)
            trace.info["kernel_judge"] = {"reward": score.reward, "outcome": score.outcome.value,
                                          "infra_failure": score.infra_failure, "status": score.status,
                                          "submission_id": score.submission_id, "diagnosis": score.diagnosis,
                                          "terms": score.terms, "speedup_eager": score.speedup_eager}
        return trace.info["kernel_judge"]

    @vf.reward
    async def kernel_judge(self, task: KernelTaskData, trace: vf.Trace) -> float:
        verdict = await self._verdict(task, trace)
        if verdict["infra_failure"] or verdict["reward"] is None:
            raise JudgeUnavailable(f"{verdict['outcome']}: {verdict['diagnosis']}")
        return verdict["reward"]

    @vf.metric
    async def correct(self, task: KernelTaskData, trace: vf.Trace) -> float:
        return 1.0 if (await self._verdict(task, trace))["status"] == "correct" else 0.0


class KernelTasksetConfig(vf.TasksetConfig):
    id: str = "kernel_judge"
    task: KernelTaskConfig = KernelTaskConfig()
    tasks: list[str] = Field(default_factory=lambda: ["kl_div", "cross_entropy"])
    samples_per_task: int = Field(default=1, ge=1, description="Copies of each task (distinct ids).")


class KernelTaskset(vf.Taskset[KernelTask, KernelTasksetConfig]):
    def load(self) -> Iterable[KernelTask]:
        task_config = self.config.task
        with JudgeClient(task_config.url, task_config.key) as client:
            prompts = {name: client.prompt(name) for name in self.config.tasks}
        for name in self.config.tasks:
            for copy in range(self.config.samples_per_task):
                yield KernelTask(KernelTaskData(id=f"{name}-{copy}", name=name, kernel_task=name,
                                                prompt=prompts[name]), task_config)


def load_environment(**kwargs: Any) -> KernelTaskset:
    """The environment-hub entry point: keyword arguments are `KernelTasksetConfig`'s (`tasks`,
    `samples_per_task`) and `KernelTaskConfig`'s (`url`, `key`, `reward`, `deadline_s`, ...)."""
    task_fields = {k: kwargs.pop(k) for k in list(kwargs) if k in KernelTaskConfig.model_fields}
    return KernelTaskset(KernelTasksetConfig(task=KernelTaskConfig(**task_fields), **kwargs))


__all__ = ["KernelTaskset", "load_environment"]
