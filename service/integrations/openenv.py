"""OpenEnv: a kernel-writing environment, `reset()` / `step(action)`, where the judge's verdict is the next
observation, for multi-turn refinement.

    from service.integrations.openenv import KernelAction, KernelEnv

    env = KernelEnv(task="kl_div", max_turns=4)
    obs = env.reset()                          # obs.prompt: the task's prompt; obs.done False
    while not obs.done:
        obs = env.step(KernelAction(code=policy(obs.prompt if obs.turn == 0 else obs.feedback)))
        obs.reward, obs.status, obs.feedback   # the reward of this attempt; what the judge said

Signature followed: OpenEnv's `Environment` (meta-pytorch/OpenEnv, `src/openenv/core/env_server/
interfaces.py` and `types.py`, 2025-12): `reset(seed=None, episode_id=None, **kwargs) -> Observation`,
`step(action, timeout_s=None, **kwargs) -> Observation`, their `*_async` twins, and the `state` property;
`Action`, `Observation` (`done`, `reward`, `metadata`) and `State` (`episode_id`, `step_count`) are pydantic
models that refuse unknown fields. Where `openenv` is installed the classes below derive from its own, so
`openenv.core.env_server.create_app(KernelEnv, KernelAction, KernelObservation)` serves this environment
over HTTP; without it they derive from local twins of the same shape.

An episode ends when the kernel is correct, when `max_turns` attempts were judged, or when the action's
code was caught hacking (policy_violation, tamper_detected). An attempt the judge could not score (see
`service.integrations.scoring`) gets `reward=None`, `metadata["infra_failure"] = True` and an observation
that says so; it does not count as a turn, so the policy may send the same code again.
"""

from __future__ import annotations

import uuid
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from service.client import AsyncJudgeClient, JudgeClient, JudgeError
from service.generation.feedback import feedback_message
from service.integrations.scoring import KernelScorer, Score, run_sync

try:  # the real base classes where OpenEnv is installed
    from openenv.core.env_server.interfaces import Environment as _Environment
    from openenv.core.env_server.types import Action as _Action
    from openenv.core.env_server.types import Observation as _Observation
    from openenv.core.env_server.types import State as _State
except ImportError:
    _STRICT = ConfigDict(extra="forbid", validate_assignment=True, arbitrary_types_allowed=True)

    class _Action(BaseModel):  # type: ignore[no-redef]
        model_config = _STRICT
        metadata: dict[str, Any] = Field(default_factory=dict)

    class _Observation(BaseModel):  # type: ignore[no-redef]
        model_config = _STRICT
        done: bool = False
        reward: bool | int | float | None = None
        metadata: dict[str, Any] = Field(default_factory=dict)

    class _State(BaseModel):  # type: ignore[no-redef]
        model_config = ConfigDict(extra="allow", validate_assignment=True, arbitrary_types_allowed=True)
        episode_id: str | None = None
        step_count: int = Field(default=0, ge=0)

    class _Environment:  # type: ignore[no-redef]
        def __init__(self, transform: Any = None, rubric: Any = None) -> None:
            self.transform = transform
            self.rubric = rubric

        def close(self) -> None:
            pass


HACKS = ("policy_violation", "tamper_detected")


class KernelAction(_Action):
    code: str = Field(description="The model's reply: a raw completion or a module defining ModelNew.")


class KernelObservation(_Observation):
    task: str
    turn: int = Field(description="Attempts judged so far in this episode.")
    prompt: str = Field(default="", description="The task's prompt (what the model is asked).")
    status: str | None = Field(default=None, description="The last verdict's status.")
    feedback: str = Field(default="", description="What the judge said, as the next user message.")


class KernelState(_State):
    task: str
    turn: int = 0
    best_reward: float | None = None
    last_status: str | None = None


class KernelEnv(_Environment):
    """One episode per `reset`: one task, up to `max_turns` judged attempts. `scorer_options` are
    `KernelScorer`'s (url, key, reward, deadline_s, attempts, ...)."""

    SUPPORTS_CONCURRENT_SESSIONS = True  # every episode's state is its own; the judge queues fairly

    def __init__(self, task: str = "kl_div", *, max_turns: int = 4, scorer: KernelScorer | None = None,
                 **scorer_options: Any) -> None:
        super().__init__()
        self.scorer = scorer or KernelScorer(task=task, **scorer_options)
        self.default_task, self.max_turns = task, max_turns
        self._state = KernelState(task=task)
        self._prompts: dict[str, str] = {}

    @property
    def state(self) -> KernelState:
        return self._state

    def reset(self, seed: int | None = None, episode_id: str | None = None, **kwargs: Any) -> KernelObservation:
        """A new episode on `kwargs["task"]` (or the environment's task); `seed` is unused: the judge draws its
        own inputs for every trial."""
        task = kwargs.get("task") or self.default_task
        self._state = KernelState(task=task, episode_id=episode_id or uuid.uuid4().hex)
        return KernelObservation(task=task, turn=0, prompt=self._prompt(task))

    async def reset_async(self, seed: int | None = None, episode_id: str | None = None,
                          **kwargs: Any) -> KernelObservation:
        return self.reset(seed=seed, episode_id=episode_id, **kwargs)

    def step(self, action: KernelAction, timeout_s: float | None = None, **kwargs: Any) -> KernelObservation:
        return run_sync(lambda: self.step_async(action, timeout_s=timeout_s, **kwargs))

    async def step_async(self, action: KernelAction, timeout_s: float | None = None,
                         **kwargs: Any) -> KernelObservation:
        state = self._state
        (score,) = await self.scorer.score([action.code], state.task)
        state.step_count += 1
        if score.infra_failure:
            return KernelObservation(task=state.task, turn=state.turn, done=False, reward=None, status=None,
                                     feedback=f"The judge could not score this attempt ({score.outcome.value}: "
                                              f"{score.diagnosis}); send it again.",
                                     metadata={"infra_failure": True, "outcome": score.outcome.value})
        state.turn += 1
        state.last_status = score.status
        if score.reward is not None:
            state.best_reward = max(score.reward, state.best_reward if state.best_reward is not None else score.reward)
        done = score.status == "correct" or score.status in HACKS or state.turn >= self.max_turns
        return KernelObservation(task=state.task, turn=state.turn, done=done, reward=score.reward,
                                 status=score.status, feedback=await self._feedback(score),
                                 metadata={"infra_failure": False, "outcome": score.outcome.value,
                                           "submission_id": score.submission_id, "terms": score.terms,
                                           "speedup_eager": score.speedup_eager})

    # --- parts ---------------------------------------------------------------------------------

    def _client(self) -> JudgeClient:
        return JudgeClient(self.scorer.url, self.scorer.key)

    def _prompt(self, task: str) -> str:
        if task not in self._prompts:
            with self._client() as client:
                self._prompts[task] = client.prompt(task)
        return self._prompts[task]

    async def _feedback(self, score: Score) -> str:
        if score.status == "correct":
            return f"Correct; {score.speedup_eager or 0:.2f}x eager PyTorch."
        if score.submission_id is None:  # refused as sent: no verdict to read
            return feedback_message(None, diagnosis=score.diagnosis)
        try:
            async with AsyncJudgeClient(self.scorer.url, self.scorer.key) as client:
                view = await client.submission(score.submission_id)
        except JudgeError:  # the reward stands; the diagnosis the reward call carried is feedback enough
            return feedback_message({"status": score.status}, diagnosis=score.diagnosis)
        verdict = view.verdict.model_dump() if view.verdict else None
        return feedback_message(verdict, diagnosis=score.diagnosis)
