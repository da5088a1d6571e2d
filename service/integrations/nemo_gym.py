"""NeMo Gym: a resources server whose `verify` is the judge, and the files that make it a Gym environment.

    python -m service.integrations.nemo_gym init gym-envs --tasks kl_div cross_entropy   # writes the server
    gym env start --search-dir gym-envs --resources-server kernel_judge --model-type vllm_model
    gym eval run --no-serve --search-dir gym-envs --agent kernel_judge_simple_agent \
        --input gym-envs/resources_servers/kernel_judge/data/train.jsonl --output rollouts.jsonl

`init` writes `resources_servers/kernel_judge/` as Gym lays a resources server out: `app.py` (this module's
server), `configs/kernel_judge.yaml` (the server, its settings, and a `simple_agent` over it), `data/
train.jsonl` (one row per task and copy: the judge's prompt as the user message, the task in
`verifier_metadata`) and `requirements.txt`.

Interface followed (NVIDIA-NeMo/Gym at 07d6b0d07b22fcf530b4c211dae2ee23100428e4, 2026-08-22:
`nemo_gym/base_resources_server.py`, `judge.py`, `openai_utils.py`, `server_utils.py`,
`responses_api_agents/simple_agent/app.py`, `resources_servers/code_gen/`): a resources server is a pydantic
model (`config`, `server_client`) whose FastAPI app answers `POST /verify`; the agent posts the dataset row
with the policy's `response` (an OpenAI Responses object) added, and records the returned row, whose
`reward: float` is what the trainer learns from and whose other top-level numbers Gym averages into its
metrics (`correct`, `speedup_eager` here). Gym needs Python 3.13, so where `nemo_gym` is not installed the
base classes are local twins of the same shape (enough to serve and test the server, not to run it in Gym).

What is judged is the last assistant message of the response (a multi-step agent's earlier messages are
drafts, as in the other adapters). Calls to `/verify` come one rollout at a time, concurrently: those for one
task that arrive within `batch_window_s` of each other go to the judge as one reward request (up to
`batch_size`), and at most `max_concurrency` requests are in flight; `KernelScorer` retries 503s.

A completion the judge could not score (see `service.integrations.scoring`) raises Gym's `JudgeError`: Gym
answers the row with reward 0.0 tagged `_ng_failure_class: judge_failed`, and rollout collection files it in
its failures sidecar, out of the metrics, to be retried on resume. Only where the caller asked for a number for
such failures (`reward: {system_error: ..., unfinished: ...}` or `unavailable_reward`) is that number
returned, with `infra_failure: true` beside it.
"""

from __future__ import annotations

import asyncio
import functools
import json
import sys
import weakref
from abc import abstractmethod
from collections.abc import Awaitable, Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

from fastapi import FastAPI, HTTPException
from fastapi.encoders import jsonable_encoder
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, field_validator

from service.client import JudgeClient
from service.integrations.scoring import KernelScorer, Score

try:  # the real base classes where NeMo Gym is installed
    from nemo_gym.base_resources_server import (
        BaseResourcesServerConfig,
        BaseVerifyRequest,
        BaseVerifyResponse,
        SimpleResourcesServer,
    )
except ImportError:

    class BaseResourcesServerConfig(BaseModel):  # type: ignore[no-redef]
        """`nemo_gym.config_types.BaseRunServerInstanceConfig`'s fields: Gym fills them from the YAML."""

        host: str = "127.0.0.1"
        port: int = 0
        num_workers: int | None = None
        entrypoint: str = "app.py"
        domain: str | None = None
        name: str = "kernel_judge"

    class _Response(BaseModel):
        """`NeMoGymResponse` (OpenAI's Responses `Response`): only its `output` items are read here."""

        model_config = ConfigDict(extra="allow")
        output: list[dict[str, Any]]

    class BaseRunRequest(BaseModel):
        responses_create_params: dict[str, Any]

    class BaseVerifyRequest(BaseRunRequest):  # type: ignore[no-redef]
        response: _Response

    class BaseVerifyResponse(BaseVerifyRequest):  # type: ignore[no-redef]
        reward: float

    class SimpleResourcesServer(BaseModel):  # type: ignore[no-redef]
        config: BaseResourcesServerConfig
        server_client: Any = None

        def setup_webserver(self) -> FastAPI:
            app = FastAPI()
            app.post("/seed_session")(self.seed_session)
            app.post("/verify")(_judge_failsafe(self.verify))
            return app

        async def seed_session(self, body: dict[str, Any] | None = None) -> dict[str, Any]:
            return {}

        @abstractmethod
        async def verify(self, body: BaseVerifyRequest) -> BaseVerifyResponse: ...

        @classmethod
        def run_webserver(cls) -> None:
            raise RuntimeError("serving in NeMo Gym needs the nemo_gym package (Python 3.13): pip install nemo-gym")

try:
    from nemo_gym.judge import JudgeError
except ImportError:

    class JudgeError(Exception):  # type: ignore[no-redef]
        """`nemo_gym.judge.JudgeError`: the scorer, not the answer, failed."""


def _judge_failsafe(verify: Callable[..., Awaitable[Any]]) -> Callable[..., Awaitable[Any]]:
    """`nemo_gym.judge.judge_failsafe`, for the twin: a JudgeError becomes the row Gym files as a failure."""

    @functools.wraps(verify)
    async def wrapper(body: BaseVerifyRequest) -> Any:
        try:
            return await verify(body)
        except JudgeError as exc:
            row = body.model_dump() | {"reward": 0.0, "_ng_failure_class": "judge_failed",
                                       "_ng_failure_judge_error": str(exc)}
            return JSONResponse(content=jsonable_encoder(row))

    return wrapper


NAME = "kernel_judge"


class KernelJudgeConfig(BaseResourcesServerConfig):
    """The server's settings, from its YAML; `judge_url` and `judge_api_key` default to JUDGE_URL and
    JUDGE_API_KEY. The rest are `KernelScorer`'s, plus `batch_window_s`."""

    judge_url: str | None = None
    judge_api_key: str | None = None
    task: str | None = Field(default=None, description="The task of a row whose verifier_metadata names none.")
    model: str | None = Field(default=None, description="Recorded with each submission (the policy's name).")
    reward: dict[str, Any] = Field(default_factory=dict, description="RewardParams overrides.")
    deadline_s: float = Field(default=600.0, gt=0)
    timeout_s: float | None = Field(default=None, gt=0)
    max_concurrency: int = Field(default=4, ge=1, description="Reward requests in flight at once.")
    batch_size: int = Field(default=64, ge=1, description="Completions in one reward request at most.")
    batch_window_s: float = Field(default=0.25, ge=0, description="How long a verify call waits for others "
                                                                  "of its task to share its request.")
    attempts: int = Field(default=5, ge=1)
    backoff_s: float = Field(default=1.0, ge=0)
    max_backoff_s: float = Field(default=30.0, ge=0)
    unavailable_reward: float | None = None

    @field_validator("reward")
    @classmethod
    def _known_parameters(cls, value: dict[str, Any]) -> dict[str, Any]:
        # A typo in the YAML fails the server's start, not every verify call hours into a run.
        from service.batches.rewards import RewardParams

        RewardParams.model_validate(value)
        return value


class KernelVerifyRequest(BaseVerifyRequest):
    verifier_metadata: dict[str, Any] | None = Field(default=None, description='{"task": "kl_div"}')


class KernelVerifyResponse(KernelVerifyRequest, BaseVerifyResponse):
    status: str = Field(description="The verdict's status, or the outcome when there is none (refused, ...).")
    correct: bool
    speedup_eager: float | None = None
    reward_terms: dict[str, float] = Field(default_factory=dict)
    submission_id: str | None = None
    diagnosis: str | None = None
    infra_failure: bool = False


class KernelJudgeResourcesServer(SimpleResourcesServer):
    config: KernelJudgeConfig
    _batchers: weakref.WeakKeyDictionary = PrivateAttr(default_factory=weakref.WeakKeyDictionary)

    def scorer(self) -> KernelScorer:
        c = self.config
        return KernelScorer(c.judge_url, c.judge_api_key, task=c.task, model=c.model, reward=c.reward,
                            deadline_s=c.deadline_s, timeout_s=c.timeout_s, max_concurrency=c.max_concurrency,
                            batch_size=c.batch_size, attempts=c.attempts, backoff_s=c.backoff_s,
                            max_backoff_s=c.max_backoff_s, unavailable_reward=c.unavailable_reward)

    async def verify(self, body: KernelVerifyRequest) -> KernelVerifyResponse:
        task = (body.verifier_metadata or {}).get("task") or self.config.task
        if not task:
            raise HTTPException(422, "no task: give the row verifier_metadata.task, or the server a `task`")
        loop = asyncio.get_running_loop()
        batcher = self._batchers.get(loop)
        if batcher is None:
            batcher = self._batchers[loop] = _Batcher(self.scorer(), self.config.batch_window_s)
        score = await batcher.score(reply_text(body.response), str(task))
        if score.infra_failure and score.reward is None:
            raise JudgeError(f"{score.outcome.value}: {score.diagnosis}")
        return KernelVerifyResponse(**body.model_dump(), reward=score.reward if score.reward is not None else 0.0,
                                    status=score.status or score.outcome.value, correct=score.status == "correct",
                                    speedup_eager=score.speedup_eager, reward_terms=score.terms,
                                    submission_id=score.submission_id, diagnosis=score.diagnosis,
                                    infra_failure=score.infra_failure)


class _Batcher:
    """Verify calls of one event loop, grouped per task into reward requests. A group is sent when it is
    `batch_size` long or `window_s` after its first call; `max_concurrency` requests are in flight at most."""

    def __init__(self, scorer: KernelScorer, window_s: float) -> None:
        self.scorer, self.window_s = scorer, window_s
        self._open: dict[str, list[tuple[str, asyncio.Future[Score]]]] = {}
        self._timers: dict[str, asyncio.TimerHandle] = {}
        self._gate = asyncio.Semaphore(scorer.max_concurrency)
        self._sending: set[asyncio.Task[None]] = set()  # the loop keeps only weak references to tasks

    async def score(self, text: str, task: str) -> Score:
        loop = asyncio.get_running_loop()
        future: asyncio.Future[Score] = loop.create_future()
        group = self._open.setdefault(task, [])
        group.append((text, future))
        if len(group) >= self.scorer.batch_size:
            self._send(task)
        elif len(group) == 1:
            self._timers[task] = loop.call_later(self.window_s, self._send, task)
        return await future

    def _send(self, task: str) -> None:
        timer = self._timers.pop(task, None)
        if timer is not None:
            timer.cancel()
        group = self._open.pop(task, [])
        if group:
            sending = asyncio.get_running_loop().create_task(self._request(task, group))
            self._sending.add(sending)
            sending.add_done_callback(self._sending.discard)

    async def _request(self, task: str, group: list[tuple[str, asyncio.Future[Score]]]) -> None:
        scores: list[Score] | None = None
        error: Exception | None = None
        try:
            async with self._gate:
                scores = await self.scorer.score([text for text, _ in group], task)
        except Exception as exc:  # noqa: BLE001 - the caller's mistake (a bad key): raised in every verify call
            error = exc
        finally:
            for i, (_, future) in enumerate(group):
                if future.done():  # its caller went away
                    continue
                if scores is not None:
                    future.set_result(scores[i])
                elif error is not None:
                    future.set_exception(error)
                else:
                    future.cancel()


def _field(item: Any, name: str) -> Any:
    return item.get(name) if isinstance(item, dict) else getattr(item, name, None)


def reply_text(response: Any) -> str:
    """The text of the last assistant message of a Responses `output` (its `output_text` parts); "" if none."""
    for item in reversed(list(_field(response, "output") or [])):
        if _field(item, "type") == "message" and (_field(item, "role") or "assistant") == "assistant":
            return "".join(_field(part, "text") or "" for part in _field(item, "content") or []
                           if _field(part, "type") == "output_text")
    return ""


# --- the environment's files ------------------------------------------------------------------------

APP = '''"""NeMo Gym resources server: the kernel judge (service/integrations/nemo_gym.py)."""
from service.integrations.nemo_gym import KernelJudgeResourcesServer

if __name__ == "__main__":
    KernelJudgeResourcesServer.run_webserver()
'''


def config_yaml(settings: dict[str, Any] | None = None) -> str:
    """The server and a `simple_agent` over it, as Gym's configs lay them out (JSON values are YAML)."""
    settings = {"entrypoint": "app.py", "domain": "coding", **(settings or {})}
    lines = [f"{NAME}:", "  resources_servers:", f"    {NAME}:"]
    lines += [f"      {key}: {json.dumps(value)}" for key, value in settings.items()]
    lines += [f"{NAME}_simple_agent:", "  responses_api_agents:", "    simple_agent:", "      entrypoint: app.py",
              "      resources_server:", "        type: resources_servers", f"        name: {NAME}",
              "      model_server:", "        type: responses_api_models", "        name: policy_model",
              "      datasets:", "      - name: train", "        type: train",
              f"        jsonl_fpath: resources_servers/{NAME}/data/train.jsonl"]
    return "\n".join(lines) + "\n"


def dataset_rows(prompts: dict[str, str], copies: int = 1) -> Iterable[dict[str, Any]]:
    """Gym's JSONL rows: the judge's prompt as the user message, the task for `verify`."""
    for task, prompt in prompts.items():
        for _ in range(copies):
            yield {"responses_create_params": {"input": [{"role": "user", "content": prompt}]},
                   "verifier_metadata": {"task": task}}


def init(root: Path, tasks: Sequence[str], *, copies: int = 1, url: str | None = None, key: str | None = None,
         settings: dict[str, Any] | None = None) -> Path:
    """Write `root/resources_servers/kernel_judge/` with the judge's prompts for `tasks`; returns that folder.
    `settings` go to the server's YAML (`KernelJudgeConfig` fields); the API key stays in JUDGE_API_KEY."""
    KernelJudgeConfig.model_validate(settings or {})
    with JudgeClient(url, key) as client:
        prompts = {task: client.prompt(task) for task in tasks}
    folder = root / "resources_servers" / NAME
    (folder / "configs").mkdir(parents=True, exist_ok=True)
    (folder / "data").mkdir(exist_ok=True)
    (folder / "app.py").write_text(APP)
    (folder / "configs" / f"{NAME}.yaml").write_text(config_yaml({"judge_url": url, **(settings or {})}
                                                                 if url else settings))
    (folder / "requirements.txt").write_text("nemo-gym\nkernel-judge\n")
    rows = dataset_rows(prompts, copies)
    (folder / "data" / "train.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows))
    return folder


def main(argv: Sequence[str] | None = None) -> None:
    import argparse

    parser = argparse.ArgumentParser(prog="python -m service.integrations.nemo_gym")
    commands = parser.add_subparsers(dest="command", required=True)
    make = commands.add_parser("init", help="write resources_servers/kernel_judge/ under ROOT")
    make.add_argument("root", type=Path)
    make.add_argument("--tasks", nargs="+", default=["kl_div", "cross_entropy"])
    make.add_argument("--copies", type=int, default=1, help="rows per task")
    make.add_argument("--url", help="the judge (default JUDGE_URL); written to the server's YAML")
    make.add_argument("--setting", action="append", default=[], metavar="KEY=JSON",
                      help='a server setting, e.g. reward={"speedup_transform":"log"} or deadline_s=900')
    args = parser.parse_args(argv)
    settings = {}
    for item in args.setting:
        name, _, value = item.partition("=")
        try:
            settings[name] = json.loads(value)
        except json.JSONDecodeError:
            settings[name] = value
    folder = init(args.root, args.tasks, copies=args.copies, url=args.url, settings=settings)
    print(folder)


if __name__ == "__main__":
    main(sys.argv[1:])
