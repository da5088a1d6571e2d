"""The `verifiers` (0.4, `verifiers.v1`) taskset: its tasks carry the judge's prompt, and verifiers' own
`Task.score` records the judge's reward and metric on a real `Trace`, against a real service and worker; a
judge outage becomes the rollout's recorded error, as verifiers' `Rollout` records it, never a 0."""

from __future__ import annotations

import asyncio

import pytest
import verifiers.v1 as vf

from service.client import JudgeClient
from service.integrations.verifiers import KernelTask, KernelTaskConfig, KernelTaskData, KernelTaskset, load_environment
from tests.integrations.conftest import COMPLETION_OF_CORRECT, HACK
from tests.service.conftest import free_port

pytestmark = pytest.mark.integrations  # verifiers: the [test-integrations] extra


def _trace(task: KernelTask, reply: str) -> vf.Trace:
    """What a rollout hands to scoring: the task and the agent's final reply."""
    return vf.Trace(task=vf.TraceTask(type=type(task).__name__, data=task.data, key=task.key, hash=task.hash),
                    agent=vf.AgentInfo(config=vf.AgentConfig(), name="solver"), root_reply=reply)


@pytest.mark.slow
@pytest.mark.timeout(1500)  # the first judged kernel is built on a shared 2-core machine: minutes under load
def test_the_taskset_scores_rollouts_with_the_judge(judge):
    taskset = load_environment(url=judge.url, key=judge.key, tasks=["kl_div"], samples_per_task=2,
                               reward={"hack_penalty": -2.0}, deadline_s=600)
    assert isinstance(taskset, KernelTaskset) and type(taskset).task_type() is KernelTask
    tasks = list(taskset)
    assert [t.data.id for t in tasks] == ["kl_div-0", "kl_div-1"] and len({t.key for t in tasks}) == 2
    assert "ModelNew" in tasks[0].data.prompt and tasks[0].data.kernel_task == "kl_div"
    correct, hack = _trace(tasks[0], COMPLETION_OF_CORRECT), _trace(tasks[1], f"```python\n{HACK}```")
    with JudgeClient(judge.url, judge.key) as client:
        before = len(client.batches())
        for task, trace in ((tasks[0], correct), (tasks[1], hack)):
            asyncio.run(task.score(trace))
        assert len(client.batches()) - before == 2  # one judge call per trace, read by the reward and the metric
    assert correct.rewards["kernel_judge"].value > 0.4 and correct.metrics["correct"] == 1.0
    assert hack.rewards["kernel_judge"].value == -2.0 and hack.metrics["correct"] == 0.0
    assert hack.info["kernel_judge"]["status"] == "policy_violation"
    assert correct.model_dump_json()  # the verdict kept in info travels with the trace


def test_an_outage_is_the_rollouts_error_not_a_zero():
    task = KernelTask(KernelTaskData(kernel_task="kl_div", prompt="write it"),
                      KernelTaskConfig(url=f"http://127.0.0.1:{free_port()}", key="k", attempts=1))
    trace = _trace(task, COMPLETION_OF_CORRECT)
    with pytest.raises(vf.TaskError, match="JudgeUnavailable: unavailable") as raised:
        asyncio.run(task.score(trace))
    trace.record_error(raised.value)  # what verifiers' Rollout does with a RolloutError
    assert trace.has_error and trace.last_error.type == "TaskError" and trace.stop_condition == "task_error"
    assert trace.rewards["kernel_judge"] is None and trace.info["kernel_judge"]["infra_failure"] is True
