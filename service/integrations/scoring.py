"""What every trainer adapter shares: completions in, one `Score` each out, over `POST /v1/rewards`.

    scorer = KernelScorer(task="kl_div", max_concurrency=4, deadline_s=600)
    scores = scorer.score_sync(completions, tasks)        # or `await scorer.score(...)` in a running loop
    [s.reward for s in scores]                            # None where the judge, not the kernel, failed

A trainer step must never die because the judge had a bad minute, and an outage must never be scored as the
candidate's 0. So every failure lands in one of two places, named by `Outcome`:

- the kernel's: a verdict (`judged`: correct, incorrect, compile_error, ..., hacks get the hack penalty) or an
  item the service refused as sent (`refused`: empty, too large, unknown task); their reward is the formula's
  (`service/batches/rewards.py`);
- the infrastructure's (`Score.infra_failure`): the judge failed on the sample (`system_error`), the service's
  deadline passed first (`unfinished`), or no answer came at all (`unavailable`: nothing listening, 503/429 or
  a 5xx after the retries, or the client-side `timeout_s` passed). Their reward is the server's `system_error`
  and `unfinished` parameters, None by default, as `POST /v1/rewards` does ("drop the sample"), and
  `unavailable_reward` (None) for the last; each is logged as a warning on the `service.integrations` logger,
  and each adapter flags them the way its trainer can (TRL: None and a logged metric; veRL: a flag in the
  score dict; verifiers: an errored rollout; OpenEnv: a None reward and `metadata["infra_failure"]`).

Calls to the service are batched (one request per task and `batch_size` completions), run concurrently up to
`max_concurrency` requests, and retried on 503, 429 and connection errors with exponential backoff (honouring
Retry-After). A request refused as a whole (a bad key, malformed reward parameters) is the caller's bug and
raises `JudgeHTTPError` at once: training on all-None rewards for hours would hide it.
"""

from __future__ import annotations

import asyncio
import enum
import logging
import random
import threading
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

from service.client import AsyncJudgeClient, Busy, JudgeUnreachable, RetryPolicy, ServerError
from service.client.models import RewardResult

logger = logging.getLogger("service.integrations")

T = TypeVar("T")


class Outcome(str, enum.Enum):
    """Where a score came from; the last three are the infrastructure's failures, not the kernel's."""

    JUDGED = "judged"
    REFUSED = "refused"
    SYSTEM_ERROR = "system_error"
    UNFINISHED = "unfinished"
    UNAVAILABLE = "unavailable"


INFRA_FAILURES = frozenset({Outcome.SYSTEM_ERROR, Outcome.UNFINISHED, Outcome.UNAVAILABLE})


@dataclass(frozen=True)
class Score:
    """One completion's reward and why. `reward` is None when the formula (or `unavailable_reward`) says to
    drop the sample."""

    reward: float | None
    outcome: Outcome
    status: str | None = None
    """The verdict status (correct, incorrect, ...); None when unjudged or refused."""
    diagnosis: str | None = None
    """The verdict's diagnosis, the refusal's reason, or what failed on the way to the judge."""
    submission_id: str | None = None
    terms: dict[str, float] = field(default_factory=dict)
    speedup_eager: float | None = None

    @property
    def infra_failure(self) -> bool:
        return self.outcome in INFRA_FAILURES


def completion_text(completion: Any) -> str:
    """The text of a completion in any trainer's shape: a string; a conversation (a list of
    `{"role", "content"}` messages, whose last assistant message is the answer); one message; content given
    as a list of parts (`{"type": "text", "text": ...}`)."""
    if isinstance(completion, str):
        return completion
    if isinstance(completion, Mapping):
        return _content_text(completion.get("content"))
    if isinstance(completion, Sequence):
        messages = [m for m in completion if isinstance(m, Mapping)]
        answers = [m for m in messages if m.get("role", "assistant") == "assistant"] or messages
        return _content_text(answers[-1].get("content")) if answers else ""
    raise TypeError(f"a completion is a string or chat messages, not {type(completion).__name__}")


def _content_text(content: Any) -> str:
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    parts = [p.get("text", "") if isinstance(p, Mapping) else str(p) for p in content]
    return "".join(parts)


def _from_result(result: RewardResult) -> Score:
    if result.submission_id is None:
        outcome = Outcome.REFUSED
    elif result.status is None:
        outcome = Outcome.UNFINISHED
        result = result.model_copy(update={"diagnosis": result.diagnosis or "not judged by the service's deadline"})
    elif result.status == "system_error":
        outcome = Outcome.SYSTEM_ERROR
    else:
        outcome = Outcome.JUDGED
    return Score(reward=result.reward, outcome=outcome, status=result.status, diagnosis=result.diagnosis,
                 submission_id=result.submission_id, terms=dict(result.terms), speedup_eager=result.speedup_eager)


class KernelScorer:
    """Scores completions through one judge service. Safe to share: each call opens its own connection pool on
    the running event loop, and `max_concurrency` bounds the requests of one call.

    `reward` overrides the formula's parameters (`service.batches.rewards.RewardParams`: `correct`,
    `speedup_transform`, `hack_penalty`, `unfinished`, `system_error`, ...). `deadline_s` is the service's
    deadline for each request; `timeout_s` (default deadline_s + 120) bounds a whole request with its retries
    on this side, after which its completions are `unavailable`.
    """

    def __init__(self, url: str | None = None, key: str | None = None, *, task: str | None = None,
                 model: str | None = None, reward: Mapping[str, Any] | None = None, deadline_s: float = 600.0,
                 timeout_s: float | None = None, max_concurrency: int = 4, batch_size: int = 64,
                 attempts: int = 5, backoff_s: float = 1.0, max_backoff_s: float = 30.0,
                 unavailable_reward: float | None = None) -> None:
        if max_concurrency < 1 or batch_size < 1 or attempts < 1:
            raise ValueError("max_concurrency, batch_size and attempts must be at least 1")
        self.url, self.key, self.task, self.model = url, key, task, model
        self.reward = dict(reward or {})
        self.deadline_s = deadline_s
        self.timeout_s = timeout_s if timeout_s is not None else deadline_s + 120.0
        self.max_concurrency, self.batch_size = max_concurrency, batch_size
        self.attempts, self.backoff_s, self.max_backoff_s = attempts, backoff_s, max_backoff_s
        self.unavailable_reward = unavailable_reward

    # --- the one call --------------------------------------------------------------------------

    async def score(self, completions: Sequence[Any], tasks: Sequence[str | None] | str | None = None
                    ) -> list[Score]:
        """One `Score` per completion, in order. `tasks` is one task id per completion, one for all, or None
        for the scorer's `task`. Raises only for the caller's mistakes (no task, a bad key, bad parameters)."""
        texts = [completion_text(c) for c in completions]
        names = self._tasks(tasks, len(texts))
        chunks = [(name, idx[i:i + self.batch_size])
                  for name, idx in _group(names).items() for i in range(0, len(idx), self.batch_size)]
        scores: list[Score | None] = [None] * len(texts)
        gate = asyncio.Semaphore(self.max_concurrency)
        # Retries are ours (with backoff and a total timeout), so the client's own are turned off.
        async with AsyncJudgeClient(self.url, self.key, retry=RetryPolicy(attempts=1)) as client:

            async def one(name: str, index: list[int]) -> None:
                async with gate:
                    for i, s in zip(index, await self._request(client, name, [texts[i] for i in index])):
                        scores[i] = s

            await asyncio.gather(*(one(name, index) for name, index in chunks))
        result = [s for s in scores if s is not None]
        _warn_failures(result)
        return result

    def score_sync(self, completions: Sequence[Any], tasks: Sequence[str | None] | str | None = None
                   ) -> list[Score]:
        """`score` for synchronous callers (TRL's and veRL's plain reward functions), in or out of a loop."""
        return run_sync(lambda: self.score(completions, tasks))

    # --- parts ---------------------------------------------------------------------------------

    def _tasks(self, tasks: Sequence[str | None] | str | None, n: int) -> list[str]:
        names = [tasks] * n if tasks is None or isinstance(tasks, str) else list(tasks)
        if len(names) != n:
            raise ValueError(f"{len(names)} tasks for {n} completions")
        resolved = [name or self.task for name in names]
        if any(name is None for name in resolved):
            raise ValueError("no task for a completion: pass a task column (e.g. `task` in the dataset) or "
                             "KernelScorer(task=...)")
        return resolved  # type: ignore[return-value]

    async def _request(self, client: AsyncJudgeClient, task: str, texts: list[str]) -> list[Score]:
        try:
            out = await asyncio.wait_for(self._with_retries(client, task, texts), self.timeout_s)
        except asyncio.TimeoutError:
            return self._unavailable(len(texts), f"no answer from the judge within {self.timeout_s:g} s")
        except (Busy, JudgeUnreachable, ServerError) as exc:
            return self._unavailable(len(texts), f"judge unavailable after {self.attempts} attempts: {exc}")
        by_index = {r.index: r for r in out.results}
        return [_from_result(by_index[i]) for i in range(len(texts))]

    async def _with_retries(self, client: AsyncJudgeClient, task: str, texts: list[str]) -> Any:
        attempt = 0
        while True:
            attempt += 1
            try:
                return await client.reward(texts, task=task, model=self.model, deadline_s=self.deadline_s,
                                           reward=self.reward)
            except (Busy, JudgeUnreachable, ServerError) as exc:
                if attempt >= self.attempts or (isinstance(exc, ServerError) and exc.status_code != 502):
                    raise
                told = getattr(exc, "retry_after", None)
                # Jitter spreads the retries of many reward workers that failed at the same moment.
                wait = told if told is not None else self.backoff_s * 2 ** (attempt - 1) * random.uniform(0.5, 1.5)
                wait = min(max(wait, 0.0), self.max_backoff_s)
                logger.info("judge busy or unreachable (%s); retry %d/%d in %.2f s", exc, attempt,
                            self.attempts - 1, wait)
                await asyncio.sleep(wait)

    def _unavailable(self, n: int, why: str) -> list[Score]:
        return [Score(reward=self.unavailable_reward, outcome=Outcome.UNAVAILABLE, diagnosis=why) for _ in range(n)]


def _group(names: list[str]) -> dict[str, list[int]]:
    groups: dict[str, list[int]] = {}
    for i, name in enumerate(names):
        groups.setdefault(name, []).append(i)
    return groups


def _warn_failures(scores: list[Score]) -> None:
    failed = [s for s in scores if s.infra_failure]
    if failed:
        kinds = sorted({s.outcome.value for s in failed})
        logger.warning("%d of %d completions not scored by the judge (%s): rewards %s, not the candidates' "
                       "own; first: %s", len(failed), len(scores), ", ".join(kinds),
                       sorted({repr(s.reward) for s in failed}), failed[0].diagnosis)


def run_sync(make: Callable[[], Awaitable[T]]) -> T:
    """Run a coroutine to completion from synchronous code: here when no loop runs in this thread, else in a
    thread of its own (a sync reward function called from inside a trainer's event loop must not block it
    by re-entering it)."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(make())  # type: ignore[arg-type]
    box: dict[str, Any] = {}

    def target() -> None:
        try:
            box["value"] = asyncio.run(make())  # type: ignore[arg-type]
        except BaseException as exc:  # noqa: BLE001 - handed back to the caller's thread below
            box["error"] = exc

    thread = threading.Thread(target=target, name="kernel-judge-score")
    thread.start()
    thread.join()
    if "error" in box:
        raise box["error"]
    return box["value"]
