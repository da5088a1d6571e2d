"""The scorer every adapter shares: completion shapes, task resolution, batching, and each kind of judge
failure kept apart from a kernel's own score (nothing listening, 503 after the retries, the service's
deadline, the client's timeout), against real API processes."""

from __future__ import annotations

import asyncio
import logging
import time

import pytest

from service.client import AuthError, InvalidRequest, JudgeClient
from service.integrations import KernelScorer, Outcome, completion_text
from tests.integrations.conftest import COMPLETION_OF_CORRECT, PROSE
from tests.service.conftest import free_port


def test_completion_text_reads_every_trainer_shape():
    assert completion_text("plain") == "plain"
    chat = [{"role": "user", "content": "write it"}, {"role": "assistant", "content": "first"},
            {"role": "tool", "content": "ran"}, {"role": "assistant", "content": "final answer"}]
    assert completion_text(chat) == "final answer"  # the last assistant message, as TRL's conversational format
    assert completion_text([{"role": "assistant", "content": [{"type": "text", "text": "a"},
                                                              {"type": "text", "text": "b"}]}]) == "ab"
    assert completion_text({"role": "assistant", "content": None}) == ""
    assert completion_text([]) == ""
    with pytest.raises(TypeError, match="string or chat messages"):
        completion_text(42)


def test_tasks_come_from_the_column_or_the_default_and_a_missing_one_is_the_callers_error():
    scorer = KernelScorer(task="kl_div")
    assert scorer._tasks(["cross_entropy", None], 2) == ["cross_entropy", "kl_div"]
    assert scorer._tasks("cross_entropy", 3) == ["cross_entropy"] * 3
    with pytest.raises(ValueError, match="no task for a completion"):
        KernelScorer()._tasks(None, 1)
    with pytest.raises(ValueError, match="2 tasks for 3 completions"):
        scorer._tasks(["a", "b"], 3)
    with pytest.raises(ValueError):
        KernelScorer(max_concurrency=0)


def test_nothing_listening_is_an_outage_with_no_reward_never_an_exception(caplog):
    scorer = KernelScorer(f"http://127.0.0.1:{free_port()}", "k", task="kl_div", attempts=3, backoff_s=0.01)
    with caplog.at_level(logging.INFO, logger="service.integrations"):
        scores = scorer.score_sync([COMPLETION_OF_CORRECT, PROSE])
    assert [s.outcome for s in scores] == [Outcome.UNAVAILABLE] * 2
    assert all(s.reward is None and s.infra_failure and s.status is None for s in scores)
    assert "after 3 attempts" in scores[0].diagnosis and "no judge at" in scores[0].diagnosis
    assert sum(r.levelno == logging.INFO for r in caplog.records) == 2  # three attempts: two retries
    warning = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warning) == 1 and "2 of 2 completions not scored" in warning[0].getMessage()
    # a defined reward, where the caller asks for one: still flagged as the judge's failure
    fixed = KernelScorer(scorer.url, "k", task="kl_div", attempts=1, unavailable_reward=-0.25).score_sync(["x"])
    assert fixed[0].reward == -0.25 and fixed[0].infra_failure


def test_sync_scoring_works_inside_a_running_event_loop():
    # A sync reward function called from a trainer's async code must not re-enter (or block) that loop.
    scorer = KernelScorer(f"http://127.0.0.1:{free_port()}", "k", task="kl_div", attempts=1)

    async def inside() -> list:
        return scorer.score_sync(["x"])

    assert asyncio.run(inside())[0].outcome is Outcome.UNAVAILABLE


@pytest.mark.slow
def test_503_is_retried_with_backoff_then_flagged(dead_judge, caplog):
    scorer = KernelScorer(dead_judge.url, dead_judge.key, task="kl_div", attempts=3, max_backoff_s=0.05)
    with caplog.at_level(logging.INFO, logger="service.integrations"):
        (score,) = scorer.score_sync([PROSE])
    assert score.outcome is Outcome.UNAVAILABLE and score.reward is None
    assert "503" in score.diagnosis and "database" in score.diagnosis
    # The scorer's own records: another module's INFO (httpx's request lines, once some earlier test in this process
    # set its logger's level) reaches the same capture.
    retries = [r.getMessage() for r in caplog.records
               if r.levelno == logging.INFO and r.name.startswith("service.integrations")]
    # Retry-After said 5 s; the scorer's cap (max_backoff_s) bounds what it waits
    assert [m.split("; ")[-1] for m in retries] == ["retry 1/2 in 0.05 s", "retry 2/2 in 0.05 s"]


@pytest.mark.slow
def test_the_services_deadline_and_the_clients_timeout_are_the_judges_failures(idle_judge):
    # No worker: nothing is ever judged. The service answers at its deadline with every completion unfinished.
    scorer = KernelScorer(idle_judge.url, idle_judge.key, task="kl_div", deadline_s=0.5)
    scores = scorer.score_sync([COMPLETION_OF_CORRECT, "", PROSE])
    assert [s.outcome for s in scores] == [Outcome.UNFINISHED, Outcome.REFUSED, Outcome.UNFINISHED]
    assert scores[0].reward is None and scores[0].infra_failure and scores[0].submission_id
    assert scores[1].reward == 0.0 and not scores[1].infra_failure and "empty" in scores[1].diagnosis
    # the formula's own `unfinished` reward is kept, and still flagged
    shaped = KernelScorer(idle_judge.url, idle_judge.key, task="kl_div", deadline_s=0.5,
                          reward={"unfinished": -0.5}).score_sync([PROSE])
    assert shaped[0].reward == -0.5 and shaped[0].outcome is Outcome.UNFINISHED
    # the client's own timeout, shorter than the service's deadline: the call comes back at the timeout
    started = time.monotonic()
    late = KernelScorer(idle_judge.url, idle_judge.key, task="kl_div", deadline_s=30, timeout_s=1.0,
                        attempts=1).score_sync([PROSE])
    assert time.monotonic() - started < 10
    assert late[0].outcome is Outcome.UNAVAILABLE and "within 1 s" in late[0].diagnosis


@pytest.mark.slow
def test_completions_are_batched_per_task_and_callers_mistakes_raise(idle_judge):
    scorer = KernelScorer(idle_judge.url, idle_judge.key, deadline_s=0.2, batch_size=2, max_concurrency=2)
    with JudgeClient(idle_judge.url, idle_judge.key) as client:
        before = {b.id for b in client.batches()}
        scores = scorer.score_sync([f"{PROSE} {i}" for i in range(5)], ["kl_div"] * 3 + ["cross_entropy"] * 2)
        created = [b for b in client.batches() if b.id not in before]
    assert len(scores) == 5 and {s.outcome for s in scores} == {Outcome.UNFINISHED}
    assert sorted(b.total for b in created) == [1, 2, 2]  # kl_div: 2 + 1, cross_entropy: 2
    with pytest.raises(AuthError):
        KernelScorer(idle_judge.url, "kj_not_a_key", task="kl_div").score_sync([PROSE])
    with pytest.raises(InvalidRequest, match="speedup_transform"):
        KernelScorer(idle_judge.url, idle_judge.key, task="kl_div", reward={"speedup_transform": "cube"}
                     ).score_sync([PROSE])
