"""The NeMo Gym resources server: `POST /verify` as Gym's agent calls it, against a real service and worker
(concurrent rollouts of one task share one reward request, a group of `batch_size` goes at once; the reward
and the metrics' fields come back on the row), an outage or an unjudged rollout filed the way Gym files a
failed judge, and the environment folder that the page's commands write.

NeMo Gym needs Python 3.13 and is not installed here; the contract is its own (NVIDIA-NeMo/Gym at
07d6b0d07b22fcf530b4c211dae2ee23100428e4: `nemo_gym/base_resources_server.py` `BaseVerifyRequest`
(`responses_create_params`, `response`) and `BaseVerifyResponse` (`reward: float`), `nemo_gym/judge.py`
`judge_failsafe` (a `JudgeError` becomes reward 0.0 with `_ng_failure_class: "judge_failed"`),
`responses_api_agents/simple_agent/app.py` (the dataset row plus `response`, posted to `/verify`)). The
`response` is a real OpenAI Responses object (`openai.types.responses.Response`, which `NeMoGymResponse`
extends), serialised as the agent sends it.
"""

from __future__ import annotations

import asyncio
import json
import runpy
import shlex
import time
from pathlib import Path

import httpx
import pydantic
import pytest
import yaml
from fastapi.testclient import TestClient
from openai.types.responses import Response

from service.client import JudgeClient
from service.integrations import nemo_gym
from service.integrations.nemo_gym import (
    KernelJudgeConfig,
    KernelJudgeResourcesServer,
    KernelVerifyRequest,
    KernelVerifyResponse,
    reply_text,
)
from tests.integrations.conftest import COMPLETION_OF_CORRECT, HACK, PROSE, doc_block
from tests.service.conftest import free_port


def _response(*texts: str, reasoning: str = "") -> Response:
    """What the policy model answered: a reasoning item, then one assistant message per text."""
    output: list[dict] = []
    if reasoning:
        output.append({"type": "reasoning", "id": "rs_0", "summary": [{"type": "summary_text", "text": reasoning}]})
    for i, text in enumerate(texts):
        output.append({"type": "message", "id": f"msg_{i}", "role": "assistant", "status": "completed",
                       "content": [{"type": "output_text", "text": text, "annotations": []}]})
    return Response(id="resp_0", created_at=0.0, model="policy", object="response", output=output,
                    parallel_tool_calls=False, tool_choice="auto", tools=[])


def _row(text: str, task: str | None = "kl_div") -> dict:
    """The agent's verify body: the dataset row, with the response added (simple_agent's `model_dump()`)."""
    row = {"responses_create_params": {"input": [{"role": "user", "content": "write the kernel"}]},
           "response": _response(text, reasoning="let me think").model_dump()}
    if task:
        row["verifier_metadata"] = {"task": task}
    return row


def test_the_reply_is_the_responses_last_assistant_message():
    single = _response("```python\nx = 1\n```", reasoning="not this")
    assert reply_text(single) == single.output_text == "```python\nx = 1\n```"  # openai's own reading
    assert reply_text(single.model_dump()) == single.output_text  # the JSON the agent posts
    assert reply_text(_response("draft", "final")) == "final"  # output_text would join both
    assert reply_text({"output": [{"type": "function_call", "name": "f", "arguments": "{}"}]}) == ""
    request = KernelVerifyRequest.model_validate(_row("hi"))
    assert reply_text(request.response) == "hi" and request.verifier_metadata == {"task": "kl_div"}
    assert set(KernelVerifyResponse.model_fields) >= {"responses_create_params", "response", "reward",
                                                      "verifier_metadata", "correct", "status"}


def test_an_outage_is_filed_as_a_failed_judge_and_bad_rows_are_refused():
    url = f"http://127.0.0.1:{free_port()}"
    server = KernelJudgeResourcesServer(config=KernelJudgeConfig(judge_url=url, judge_api_key="k", attempts=1,
                                                                 batch_window_s=0))
    with TestClient(server.setup_webserver()) as client:
        row = client.post("/verify", json=_row(COMPLETION_OF_CORRECT)).json()
        assert row["_ng_failure_class"] == "judge_failed" and row["reward"] == 0.0
        assert row["_ng_failure_judge_error"].startswith("unavailable: judge unavailable after 1 attempts")
        assert row["verifier_metadata"] == {"task": "kl_div"}  # the row itself travels back, for a retry
        refused = client.post("/verify", json=_row(PROSE, task=None))
        assert refused.status_code == 422 and "verifier_metadata.task" in refused.json()["detail"]
        assert client.post("/verify", json={"response": {"output": []}}).status_code == 422
    # a number the caller asked for, flagged as the judge's failure rather than filed
    fixed = KernelJudgeResourcesServer(config=KernelJudgeConfig(judge_url=url, attempts=1, batch_window_s=0,
                                                                unavailable_reward=-0.5, task="kl_div"))
    with TestClient(fixed.setup_webserver()) as client:
        row = client.post("/verify", json=_row(PROSE, task=None)).json()
    assert row["reward"] == -0.5 and row["infra_failure"] is True and row["status"] == "unavailable"
    assert "_ng_failure_class" not in row
    with pytest.raises(pydantic.ValidationError, match="speedup_transform"):  # at the server's start
        KernelJudgeConfig(reward={"speedup_transform": "cube"})


@pytest.mark.slow
@pytest.mark.timeout(1500)  # the first judged kernel is built on a shared 2-core machine: minutes under load
def test_concurrent_rollouts_share_a_reward_request_and_get_the_judges_rewards(judge):
    config = KernelJudgeConfig(judge_url=judge.url, judge_api_key=judge.key, deadline_s=600, batch_window_s=0.5,
                               reward={"hack_penalty": -2.0}, max_concurrency=2)
    app = KernelJudgeResourcesServer(config=config).setup_webserver()

    async def rollouts() -> list[dict]:
        # Gym's agents post each finished rollout to /verify at once, many at a time, on one event loop.
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://gym", timeout=900) as gym:
            answers = await asyncio.gather(*(gym.post("/verify", json=_row(text))
                                             for text in (COMPLETION_OF_CORRECT, f"```python\n{HACK}```", PROSE)))
        return [a.raise_for_status().json() for a in answers]

    with JudgeClient(judge.url, judge.key) as client:
        before = {b.id for b in client.batches()}
        correct, hack, prose = asyncio.run(rollouts())
        created = [b for b in client.batches() if b.id not in before]
    assert [b.total for b in created] == [3]  # one reward request for the three rollouts
    assert correct["reward"] > 0.4 and correct["correct"] is True and correct["speedup_eager"] > 0
    assert correct["status"] == "correct" and correct["submission_id"] and correct["infra_failure"] is False
    assert set(correct["reward_terms"]) == {"format", "compile", "correct", "speedup"}
    assert hack["reward"] == -2.0 and hack["status"] == "policy_violation" and hack["correct"] is False
    assert prose["reward"] == 0.0 and prose["status"] == "compile_error"
    assert correct["response"]["output"][1]["content"][0]["text"] == COMPLETION_OF_CORRECT  # the row, carried


def _commands(block: str) -> list[list[str]]:
    """The page's shell commands, continuation lines joined, comments and `export`s dropped."""
    lines = block.replace("\\\n", " ").splitlines()
    return [shlex.split(line, comments=True) for line in lines if line.strip() and not line.startswith(("#", "export"))]


@pytest.mark.slow
def test_the_pages_commands_write_a_gym_environment_whose_rows_verify(judge, tmp_path, capsys):
    # The commands of docs/integrations.md, with its judge and folder replaced by this test's.
    init, start, evaluate = (
        [tmp_path.as_posix() if arg == "gym-envs" else arg.replace("gym-envs/", f"{tmp_path}/")
         .replace("http://judge:8000", judge.url) for arg in command]
        for command in _commands(doc_block("NeMo Gym", "bash")))
    assert init[:4] == ["python", "-m", "service.integrations.nemo_gym", "init"]
    nemo_gym.main(init[3:])
    folder = tmp_path / "resources_servers" / "kernel_judge"
    assert capsys.readouterr().out.strip() == str(folder)
    # `gym env start --search-dir D --resources-server NAME` loads D/resources_servers/NAME/configs/NAME.yaml
    # (nemo_gym/cli/main.py::_asset_config_path); `gym eval run --agent A` needs A among its top-level keys.
    server_name = start[start.index("--resources-server") + 1]
    assert start[start.index("--search-dir") + 1] == str(tmp_path) == evaluate[evaluate.index("--search-dir") + 1]
    config = yaml.safe_load((tmp_path / "resources_servers" / server_name / "configs" / f"{server_name}.yaml")
                            .read_text())
    agent = config[evaluate[evaluate.index("--agent") + 1]]["responses_api_agents"]["simple_agent"]
    assert agent["resources_server"] == {"type": "resources_servers", "name": server_name}
    dataset = tmp_path / agent["datasets"][0]["jsonl_fpath"]
    assert dataset == folder / "data" / "train.jsonl" == Path(evaluate[evaluate.index("--input") + 1])
    server = config[server_name]["resources_servers"][server_name]
    settings = KernelJudgeConfig.model_validate(server)  # as Gym validates the server's YAML block
    assert settings.judge_url == judge.url and settings.reward == {"speedup_transform": "log"}
    assert settings.deadline_s == 600 and server["entrypoint"] == "app.py" and server["domain"] == "coding"
    rows = [json.loads(line) for line in dataset.read_text().splitlines()]
    assert [r["verifier_metadata"]["task"] for r in rows] == ["kl_div"] * 8 + ["cross_entropy"] * 8
    assert "ModelNew" in rows[0]["responses_create_params"]["input"][0]["content"]
    app = runpy.run_path(str(folder / "app.py"))  # imports the server; serving needs Gym (`__main__`)
    assert app["KernelJudgeResourcesServer"] is KernelJudgeResourcesServer
    # a row of the dataset, answered and verified: Gym's round trip (the kernel's reward here: no code)
    with TestClient(KernelJudgeResourcesServer(config=settings.model_copy(update={"judge_api_key": judge.key}))
                    .setup_webserver()) as client:
        verified = client.post("/verify", json=rows[8] | {"response": _response(PROSE).model_dump()}).json()
    assert verified["status"] == "compile_error" and verified["reward"] == 0.0
    assert verified["verifier_metadata"] == {"task": "cross_entropy"}


@pytest.mark.slow
def test_a_full_group_goes_at_once_and_unjudged_rollouts_are_the_judges_failures(idle_judge):
    # No worker: the service answers at its deadline with every completion unfinished.
    config = KernelJudgeConfig(judge_url=idle_judge.url, judge_api_key=idle_judge.key, deadline_s=0.2,
                               batch_size=2, batch_window_s=30, reward={"unfinished": -0.1})
    app = KernelJudgeResourcesServer(config=config).setup_webserver()

    async def rollouts() -> list[dict]:
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://gym") as gym:
            answers = await asyncio.gather(*(gym.post("/verify", json=_row(f"{PROSE} {i}")) for i in range(4)))
        return [a.raise_for_status().json() for a in answers]

    with JudgeClient(idle_judge.url, idle_judge.key) as client:
        before = {b.id for b in client.batches()}
        started = time.monotonic()
        rows = asyncio.run(rollouts())
        created = [b for b in client.batches() if b.id not in before]
    assert time.monotonic() - started < 20  # two full groups of two: sent at once, not after the 30 s window
    assert sorted(b.total for b in created) == [2, 2]
    # the caller asked for a number for unjudged completions: given, and flagged as the judge's failure
    assert [(r["reward"], r["status"], r["infra_failure"]) for r in rows] == [(-0.1, "unfinished", True)] * 4
