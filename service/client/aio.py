"""`AsyncJudgeClient`: the same API as `JudgeClient` for asyncio code (an RL trainer's async rollout loop).

    async with AsyncJudgeClient() as judge:
        out = await judge.reward(completions, task="kl_div", deadline_s=600)
        rewards = out.rewards

Every call is described once in `service.client.calls`; only the sending differs from the sync client.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

import httpx
from typing_extensions import Self

from service.batches.lines import LineCutter
from service.client import calls, models
from service.client.calls import Call, RetryPolicy
from service.client.errors import WaitTimeout


class AsyncJudgeClient:
    def __init__(self, url: str | None = None, key: str | None = None, *, timeout: float = 30.0,
                 retry: RetryPolicy | None = None, transport: httpx.AsyncBaseTransport | None = None,
                 sleep: Callable[[float], Awaitable[None]] = asyncio.sleep) -> None:
        self.url = (url or calls.default_url()).rstrip("/")
        key = key if key is not None else calls.default_key()
        headers = {"Authorization": f"Bearer {key}"} if key else {}
        self.retry = retry or RetryPolicy()
        self._sleep = sleep
        self._http = httpx.AsyncClient(base_url=self.url, headers=headers, timeout=timeout, transport=transport)

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        await self._http.aclose()

    async def _send(self, call: Call, *, stream: bool = False) -> httpx.Response:
        attempt = 0
        while True:
            attempt += 1
            try:
                request = self._http.build_request(call.method, call.path, **call.request_kwargs())
                response = await self._http.send(request, stream=stream)
            except httpx.TransportError as exc:
                raise calls.unreachable(self.url, exc) from None
            wait = self.retry.wait_s(response, attempt)
            if wait is None:
                break
            await response.aclose()
            await self._sleep(wait)
        if response.status_code >= 400 and stream:
            await response.aread()
        calls.raise_for(response)
        return response

    async def _call(self, call: Call) -> Any:
        return call.parse(await self._send(call))

    @contextlib.asynccontextmanager
    async def _stream(self, call: Call) -> AsyncIterator[httpx.Response]:
        response = await self._send(call, stream=True)
        try:
            yield response
        finally:
            await response.aclose()

    # --- submissions -----------------------------------------------------------------------------

    async def submit(self, task: str, source: str, **fields: Any) -> models.SubmissionAccepted:
        return await self._call(calls.submit(task, source, **fields))

    async def publish(self, submission_id: str, public: bool = True) -> models.Submission:
        """Let anyone read the submission's source (False: only its submitter and admins again)."""
        return await self._call(calls.publish(submission_id, public))

    async def submission(self, submission_id: str) -> models.Submission:
        return await self._call(calls.submission(submission_id))

    async def submissions(self, **filters: Any) -> list[models.SubmissionSummary]:
        return await self._call(calls.submissions(**filters))

    async def source(self, submission_id: str) -> str:
        return await self._call(calls.source(submission_id))

    async def profile(self, submission_id: str) -> models.SubmissionProfile:
        """The Nsight Compute profile asked for with `profile=True` (NotFound when none was)."""
        return await self._call(calls.profile(submission_id))

    async def wait(self, submission_id: str, *, timeout: float | None = None, poll_s: float = 0.5
                   ) -> models.Submission:
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            view = await self.submission(submission_id)
            if view.done:
                return view
            if deadline is not None and time.monotonic() > deadline:
                raise WaitTimeout(f"submission {submission_id} is still {view.stage} after {timeout:g} s")
            await self._sleep(poll_s)

    # --- tasks and leaderboards ------------------------------------------------------------------

    async def tasks(self) -> list[models.TaskSummary]:
        return await self._call(calls.tasks())

    async def task(self, task_id: str) -> models.Task:
        return await self._call(calls.task(task_id))

    async def prompt(self, task_id: str, language: str | None = None) -> str:
        return await self._call(calls.prompt(task_id, language))

    async def leaderboard(self, task_id: str, **options: Any) -> models.Leaderboard:
        return await self._call(calls.leaderboard(task_id, **options))

    # --- batches ---------------------------------------------------------------------------------

    async def create_batch(self, samples: Iterable[Mapping[str, Any] | str], *, name: str | None = None
                           ) -> models.BatchAccepted:
        return await self._call(calls.create_batch(samples, name=name))

    async def batch(self, batch_id: str) -> models.Batch:
        return await self._call(calls.batch(batch_id))

    async def batches(self) -> list[models.Batch]:
        return await self._call(calls.batches())

    async def batch_metrics(self, batch_id: str) -> models.BatchMetrics:
        return await self._call(calls.batch_metrics(batch_id))

    async def cancel_batch(self, batch_id: str) -> models.Batch:
        return await self._call(calls.cancel_batch(batch_id))

    async def wait_batch(self, batch_id: str, *, timeout: float | None = None, poll_s: float = 1.0
                         ) -> models.Batch:
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            view = await self.batch(batch_id)
            if view.finished:
                return view
            if deadline is not None and time.monotonic() > deadline:
                raise WaitTimeout(f"batch {batch_id} is {view.progress:.0%} done after {timeout:g} s")
            await self._sleep(poll_s)

    async def results(self, batch_id: str) -> AsyncIterator[models.ResultRow]:
        async with self._stream(calls.results(batch_id, "jsonl")) as response:
            cutter = LineCutter()  # not iter_lines: it also breaks at U+2028 and the like, which JSON allows raw
            async for chunk in response.aiter_text():
                for line in cutter.feed(chunk):
                    if line.strip():
                        yield models.ResultRow.model_validate_json(line)
            for line in cutter.finish():
                if line.strip():
                    yield models.ResultRow.model_validate_json(line)

    async def download_results(self, batch_id: str, path: str | Path, fmt: str | None = None) -> int:
        fmt = fmt or ("csv" if str(path).endswith(".csv") else "jsonl")
        written = 0
        async with self._stream(calls.results(batch_id, fmt)) as response:
            with open(path, "wb") as out:
                async for chunk in response.aiter_bytes():
                    written += out.write(chunk)
        return written

    # --- rewards ---------------------------------------------------------------------------------

    async def reward(self, completions: Iterable[str | Mapping[str, Any]], *, task: str, model: str | None = None,
                     deadline_s: float | None = None, reward: Mapping[str, Any] | None = None) -> models.Rewards:
        return await self._call(calls.reward(task, completions, model=model, deadline_s=deadline_s, reward=reward))
