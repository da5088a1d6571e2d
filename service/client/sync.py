"""`JudgeClient`: the blocking Python client of the judge's HTTP API (the CLI is built on it).

    from service.client import JudgeClient

    with JudgeClient() as judge:                     # JUDGE_URL and JUDGE_API_KEY from the environment
        sub = judge.submit("kl_div", open("kernel.py").read(), model="my-llm")
        print(judge.wait(sub.id).verdict.status)
        batch = judge.create_batch(samples, name="run-42")   # dicts: task, source|completion, model, ...
        print(judge.wait_batch(batch.id).verdicts)

A reward function for TRL's `GRPOTrainer` (veRL and OpenRLHF call a function of the same kind): the trainer
passes the completions and, as keyword lists, the dataset's other columns, here `task`::

    from service.client import JudgeClient

    judge = JudgeClient(timeout=60)

    def kernel_reward(completions, task, **kwargs):
        texts = [c[-1]["content"] if isinstance(c, list) else c for c in completions]   # chat or plain format
        rewards = [0.0] * len(texts)
        for name in set(task):                               # one blocking call per task in the group
            index = [i for i, t in enumerate(task) if t == name]
            out = judge.reward([texts[i] for i in index], task=name, deadline_s=600)
            for i, value in zip(index, out.rewards):
                rewards[i] = value
        return rewards

Errors are the tree in `service.client.errors`; 429 and 503 are retried as Retry-After says (bounded by
`RetryPolicy`), everything else raises at once.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any, BinaryIO

import httpx
from typing_extensions import Self

from service.batches.lines import LineCutter
from service.client import calls, models
from service.client.calls import Call, RetryPolicy
from service.client.errors import JudgeUnreachable, WaitTimeout


class JudgeClient:
    """One connection pool to one judge. Thread-safe as httpx.Client is; close it (or use `with`)."""

    def __init__(self, url: str | None = None, key: str | None = None, *, timeout: float = 30.0,
                 retry: RetryPolicy | None = None, transport: httpx.BaseTransport | None = None,
                 sleep: Callable[[float], None] = time.sleep) -> None:
        self.url = (url or calls.default_url()).rstrip("/")
        key = key if key is not None else calls.default_key()
        headers = {"Authorization": f"Bearer {key}"} if key else {}
        self.retry = retry or RetryPolicy()
        self._sleep = sleep
        self._http = httpx.Client(base_url=self.url, headers=headers, timeout=timeout, transport=transport)

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self._http.close()

    # --- plumbing --------------------------------------------------------------------------------

    def _send(self, call: Call, *, stream: bool = False) -> httpx.Response:
        attempt = 0
        while True:
            attempt += 1
            try:
                request = self._http.build_request(call.method, call.path, **call.request_kwargs())
                response = self._http.send(request, stream=stream)
            except httpx.TransportError as exc:
                raise calls.unreachable(self.url, exc) from None
            wait = self.retry.wait_s(response, attempt)
            if wait is None:
                break
            response.close()
            self._sleep(wait)
        if response.status_code >= 400 and stream:
            response.read()
        calls.raise_for(response)
        return response

    def _call(self, call: Call) -> Any:
        return call.parse(self._send(call))

    def wait_ready(self, timeout: float, *, alive: Callable[[], bool] | None = None, poll_s: float = 0.5) -> None:
        """Poll `GET /readyz` until it answers 200 (a service that has just been started, say). `alive` tells
        whether the server process is still running: when it says no, waiting stops at once."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                if self._http.get("/readyz").status_code == 200:
                    return
            except httpx.TransportError:
                pass
            if alive is not None and not alive():
                raise JudgeUnreachable(self.url, "its process exited before it was ready")
            if time.monotonic() > deadline:
                raise WaitTimeout(f"the judge at {self.url} was not ready after {timeout:g} s")
            self._sleep(poll_s)

    # --- submissions -----------------------------------------------------------------------------

    def submit(self, task: str, source: str, **fields: Any) -> models.SubmissionAccepted:
        """Queue one candidate (a module or a raw completion). Fields: model, sample_index, sampling, tags,
        idempotency_key, public, profile."""
        return self._call(calls.submit(task, source, **fields))

    def publish(self, submission_id: str, public: bool = True) -> models.Submission:
        """Let anyone read the submission's source (False: only its submitter and admins again)."""
        return self._call(calls.publish(submission_id, public))

    def submission(self, submission_id: str) -> models.Submission:
        return self._call(calls.submission(submission_id))

    def submissions(self, **filters: Any) -> list[models.SubmissionSummary]:
        """Your submissions, filtered as the server allows (task, model, status, batch, ...)."""
        return self._call(calls.submissions(**filters))

    def source(self, submission_id: str) -> str:
        return self._call(calls.source(submission_id))

    def profile(self, submission_id: str) -> models.SubmissionProfile:
        """The Nsight Compute profile asked for with `profile=True` (NotFound when none was)."""
        return self._call(calls.profile(submission_id))

    def wait_profile(self, submission_id: str, *, timeout: float | None = None,
                     poll_s: float = 1.0) -> models.SubmissionProfile:
        """Poll until the profile is no longer pending."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            found = self.profile(submission_id)
            if found.status != "pending":
                return found
            if deadline is not None and time.monotonic() > deadline:
                raise WaitTimeout(f"the profile of submission {submission_id} is still pending after {timeout:g} s")
            self._sleep(poll_s)

    def wait(self, submission_id: str, *, timeout: float | None = None, poll_s: float = 0.5,
             on_update: Callable[[models.Submission], None] | None = None) -> models.Submission:
        """Poll until the submission is done; `on_update` sees each change of stage (and of the shared headers'
        build it waits on)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        last = None
        while True:
            view = self.submission(submission_id)
            headers = view.shared_headers
            seen = (view.stage, view.position, headers and (headers.state, headers.building, headers.ready))
            if on_update and seen != last:
                last = seen
                on_update(view)
            if view.done:
                return view
            if deadline is not None and time.monotonic() > deadline:
                raise WaitTimeout(f"submission {submission_id} is still {view.stage} after {timeout:g} s")
            self._sleep(poll_s)

    # --- tasks and leaderboards ------------------------------------------------------------------

    def tasks(self) -> list[models.TaskSummary]:
        return self._call(calls.tasks())

    def task(self, task_id: str) -> models.Task:
        return self._call(calls.task(task_id))

    def prompt(self, task_id: str, language: str | None = None) -> str:
        return self._call(calls.prompt(task_id, language))

    def leaderboard(self, task_id: str, **options: Any) -> models.Leaderboard:
        return self._call(calls.leaderboard(task_id, **options))

    # --- batches ---------------------------------------------------------------------------------

    def create_batch(self, samples: Iterable[Mapping[str, Any] | str], *, name: str | None = None
                     ) -> models.BatchAccepted:
        """Upload samples (dicts, or JSONL lines as they are). Raises InvalidRequest (422) when every line
        is bad; otherwise the accepted answer lists the rejected lines."""
        return self._call(calls.create_batch(samples, name=name))

    def batch(self, batch_id: str) -> models.Batch:
        return self._call(calls.batch(batch_id))

    def batches(self) -> list[models.Batch]:
        return self._call(calls.batches())

    def batch_metrics(self, batch_id: str) -> models.BatchMetrics:
        return self._call(calls.batch_metrics(batch_id))

    def cancel_batch(self, batch_id: str) -> models.Batch:
        return self._call(calls.cancel_batch(batch_id))

    def wait_batch(self, batch_id: str, *, timeout: float | None = None, poll_s: float = 1.0,
                   on_update: Callable[[models.Batch], None] | None = None) -> models.Batch:
        """Poll until the batch is done or cancelled; `on_update` sees every poll (for a progress bar)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            view = self.batch(batch_id)
            if on_update:
                on_update(view)
            if view.finished:
                return view
            if deadline is not None and time.monotonic() > deadline:
                raise WaitTimeout(f"batch {batch_id} is {view.progress:.0%} done after {timeout:g} s")
            self._sleep(poll_s)

    def results(self, batch_id: str) -> Iterator[models.ResultRow]:
        """The batch's rows, streamed from the server's JSONL (one row per line of the upload)."""
        with self._stream(calls.results(batch_id, "jsonl")) as response:
            cutter = LineCutter()  # not iter_lines: it also breaks at U+2028 and the like, which JSON allows raw
            for chunk in response.iter_text():
                for line in cutter.feed(chunk):
                    if line.strip():
                        yield models.ResultRow.model_validate_json(line)
            for line in cutter.finish():
                if line.strip():
                    yield models.ResultRow.model_validate_json(line)

    def download_results(self, batch_id: str, dest: str | Path | BinaryIO, fmt: str | None = None) -> int:
        """Stream the results to a file or a binary stream (format from the suffix: .csv, else jsonl);
        returns the bytes written. Rows are never held in memory."""
        fmt = fmt or ("csv" if str(getattr(dest, "name", dest)).endswith(".csv") else "jsonl")
        written = 0
        with self._stream(calls.results(batch_id, fmt)) as response, _binary(dest) as out:
            for chunk in response.iter_bytes():
                written += out.write(chunk)
        return written

    @contextlib.contextmanager
    def _stream(self, call: Call) -> Iterator[httpx.Response]:
        response = self._send(call, stream=True)
        try:
            yield response
        finally:
            response.close()

    # --- rewards ---------------------------------------------------------------------------------

    def reward(self, completions: Iterable[str | Mapping[str, Any]], *, task: str, model: str | None = None,
               deadline_s: float | None = None, reward: Mapping[str, Any] | None = None) -> models.Rewards:
        """Judge the completions and return one scalar reward each, blocking until all are judged or the
        deadline passes (then unfinished ones get the server's timeout reward and `complete` is False).
        `reward` configures the formula's terms (see the server's POST /v1/rewards)."""
        return self._call(calls.reward(task, completions, model=model, deadline_s=deadline_s, reward=reward))


@contextlib.contextmanager
def _binary(dest: str | Path | BinaryIO) -> Iterator[BinaryIO]:
    if hasattr(dest, "write"):
        yield dest  # type: ignore[misc]  # the caller's stream: not ours to close
        return
    with open(dest, "wb") as out:  # type: ignore[arg-type]
        yield out
