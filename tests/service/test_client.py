"""The Python client against the real app: typed answers, the error tree, Retry-After honoured (bounded), the
async twin; and the CLI with no server at all (exit code 3, one clear line, no traceback)."""

from __future__ import annotations

import asyncio
import hashlib
import subprocess
import sys

import httpx
import pytest
from fastapi.testclient import TestClient

from service.client import (
    AsyncJudgeClient,
    AuthError,
    Busy,
    InvalidRequest,
    JudgeClient,
    JudgeUnreachable,
    NotFound,
)
from service.client.calls import RetryPolicy
from service.core.config import Settings
from service.main import create_app
from tests.service.conftest import ROOT, InProcessTransport, free_port, new_key


def _judge(test_client: TestClient, key: str | None = None, **kwargs: object) -> JudgeClient:
    # The real app in-process: the client's own request and error code run.
    return JudgeClient("http://testserver", key or "", transport=InProcessTransport(test_client), **kwargs)


def test_typed_answers_and_error_tree(client, db):
    key = new_key(db, "frank")
    with _judge(client, key) as judge:
        tasks = {t.id: t for t in judge.tasks()}
        assert tasks["kl_div"].kernelbench_id == "L1-98"
        assert "ModelNew" in judge.prompt("kl_div")
        assert "@cute.kernel" in judge.prompt("kl_div", "cute") and "load_inline" not in judge.prompt("kl_div", "cute")
        text = "import torch\nclass ModelNew(torch.nn.Module): pass\n"
        accepted = judge.submit("kl_div", text, model="m")
        view = judge.submission(accepted.id)
        assert view.task == "kl_div" and view.model == "m" and view.status == "queued" and view.verdict is None
        assert view.text_sha256 == hashlib.sha256(text.encode()).hexdigest()
        with pytest.raises(NotFound) as missing:
            judge.submission("nope")
        assert missing.value.status_code == 404 and "nope" in missing.value.message
        with pytest.raises(NotFound) as unknown:
            judge.submit("nope", "x")
        assert "valid_task_ids" in str(unknown.value)  # the server's extra fields reach the message
        with pytest.raises(InvalidRequest) as empty:
            judge.submit("kl_div", "   ")
        assert empty.value.status_code == 422 and "empty" in empty.value.message
    with _judge(client, None) as anonymous, pytest.raises(AuthError) as denied:
        anonymous.submit("kl_div", "x")
    assert denied.value.status_code == 401 and "API key" in denied.value.message


def test_publish_makes_a_source_readable_by_anyone_and_private_again(client, db):
    source = "import torch\nclass ModelNew(torch.nn.Module): pass  # publish-marker\n"
    key = new_key(db, "grace")
    with _judge(client, key) as judge, _judge(client, None) as anonymous:
        private = judge.submit("kl_div", source)
        public = judge.submit("kl_div", source + "# second\n", public=True)
        assert not judge.submission(private.id).source_public and judge.submission(public.id).source_public
        assert anonymous.source(public.id) == source + "# second\n"
        with pytest.raises(AuthError):
            anonymous.source(private.id)
        assert judge.publish(private.id).source_public
        assert anonymous.source(private.id) == source
        assert not judge.publish(private.id, public=False).source_public
        with pytest.raises(AuthError):
            anonymous.source(private.id)


def test_listing_your_submissions_reads_lines_with_a_verdict(client, db):
    from sandbox.verdict import Status, Verdict
    from service.queue import claims as q

    with _judge(client, new_key(db, "ivy")) as judge:
        judged = judge.submit("kl_div", "import torch\nclass ModelNew(torch.nn.Module): pass  # judged\n", model="m")
        (claim,) = q.claim(db, "w", 1, 60)
        verdict = Verdict(status=Status.INCORRECT, diagnosis="off", task="kl_div", device="cpu",
                          judged_sha256=claim.text_sha256)
        assert q.finish(db, claim.token, verdict, "w", q.RetryPolicy()) == "verdict"
        waiting = judge.submit("cross_entropy", "import torch\nclass ModelNew(torch.nn.Module): pass\n")
        lines = {line.id: line for line in judge.submissions()}
        assert lines[judged.id].done and lines[judged.id].verdict == "incorrect" and lines[judged.id].model == "m"
        assert not lines[waiting.id].done and lines[waiting.id].verdict is None
        assert [line.id for line in judge.submissions(task="cross_entropy")] == [waiting.id]


def test_429_is_retried_as_retry_after_says_then_raised(db_url, db):
    settings = Settings(database_url=db_url, rate_limit_per_minute=1, rate_limit_burst=1)
    key = new_key(db, "gina")
    waits: list[float] = []
    with TestClient(create_app(settings)) as test_client, \
            _judge(test_client, key, retry=RetryPolicy(attempts=3, max_wait_s=5.0), sleep=waits.append) as judge:
        judge.submit("kl_div", "print(1)\n")  # the burst of one
        with pytest.raises(Busy) as busy:
            judge.submit("kl_div", "print(2)\n")
    # The server said Retry-After: 60 (one token a minute); the client waited twice, each time capped at 5 s.
    assert busy.value.status_code == 429 and busy.value.retry_after == pytest.approx(60, abs=1)
    assert waits == [5.0, 5.0]


def test_async_client_against_the_app(settings, db):
    key = new_key(db, "hana")

    async def scenario() -> tuple:
        app = create_app(settings)
        transport = httpx.ASGITransport(app=app)
        async with AsyncJudgeClient("http://testserver", key, transport=transport) as judge:
            tasks = await judge.tasks()
            accepted = await judge.submit("cross_entropy", "print(1)\n", sample_index=3)
            view = await judge.submission(accepted.id)
            try:
                await judge.batch("nope")
            except NotFound as exc:
                missing = exc
        return tasks, view, missing

    tasks, view, missing = asyncio.run(scenario())
    assert {t.id for t in tasks} == {"kl_div", "cross_entropy", "kl_div_train", "cross_entropy_train"}
    assert view.sample_index == 3 and view.task == "cross_entropy"
    assert missing.status_code == 404


def test_source_as_the_readme_calls_it_returns_the_text_against_a_real_server(live_api, db, monkeypatch):
    # README: `JUDGE_URL` and `JUDGE_API_KEY` exported, then `JudgeClient().source(id)` gives the source back.
    _, base = live_api()
    monkeypatch.setenv("JUDGE_URL", base)
    monkeypatch.setenv("JUDGE_API_KEY", new_key(db, "ines"))
    completion = "Here is my kernel:\n```python\nimport torch\nclass ModelNew(torch.nn.Module): pass\n```\n"
    with JudgeClient() as judge:
        accepted = judge.submit("kl_div", completion)
        text = judge.source(accepted.id)
    assert text == completion  # the text itself, not the JSON wrapper around it

    async def async_twin() -> str:
        async with AsyncJudgeClient() as judge:
            return await judge.source(accepted.id)

    assert asyncio.run(async_twin()) == completion


@pytest.mark.slow  # the real CLI in a subprocess
def test_no_server_means_exit_3_and_a_clear_line():
    url = f"http://127.0.0.1:{free_port()}"  # bound, then released: nothing listens there
    with pytest.raises(JudgeUnreachable):
        JudgeClient(url).tasks()
    for args in (["tasks"], ["status", "abc"], ["batch", str(ROOT / "README.md")]):
        done = subprocess.run([sys.executable, "-m", "service.cli.main", *args, "--url", url], check=False,
                              capture_output=True, text=True, cwd=ROOT, timeout=60)
        assert done.returncode == 3, (args, done.stderr)
        assert f"no judge at {url}" in done.stderr and "kernel-judge serve" in done.stderr
        assert "Traceback" not in done.stderr and done.stdout == ""
    usage = subprocess.run([sys.executable, "-m", "service.cli.main", "submit"], check=False, capture_output=True,
                           text=True, cwd=ROOT, timeout=60)
    assert usage.returncode == 2 and "Traceback" not in usage.stderr


def test_wait_ready_returns_on_200_and_stops_when_the_server_is_gone(client):
    with _judge(client) as judge:
        judge.wait_ready(5)  # the real app's /readyz, through its own transport

    calls: list[int] = []
    with JudgeClient(f"http://127.0.0.1:{free_port()}", "", sleep=lambda s: None) as nobody:
        with pytest.raises(JudgeUnreachable, match="exited before it was ready"):
            nobody.wait_ready(60, alive=lambda: calls.append(1) or len(calls) < 3)
    assert len(calls) == 3  # asked on every failed poll, and the first "no" ended the wait
