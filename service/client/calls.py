"""Each API call described once, without I/O, so the sync and async clients share every detail.

A `Call` says what to send and how to read the answer; `JudgeClient` and `AsyncJudgeClient` only differ in
how they send it. The retry policy (429/503 with Retry-After, bounded) and the error mapping live here too.
"""

from __future__ import annotations

import datetime as dt
import email.utils
import json
import os
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import httpx

from service.client import models
from service.client.errors import JudgeHTTPError, JudgeUnreachable, error_for_status

DEFAULT_URL = "http://127.0.0.1:8000"

RETRY_STATUSES = (429, 503)
"""Answers that mean "not now": the rate limit, the queue quota, a server that is not ready yet."""


def default_url() -> str:
    return os.environ.get("JUDGE_URL") or DEFAULT_URL


def default_key() -> str | None:
    return os.environ.get("JUDGE_API_KEY") or None


@dataclass
class Call:
    method: str
    path: str
    parse: Callable[[httpx.Response], Any] = lambda r: r.json()
    params: dict[str, Any] | None = None
    json: Any = None
    content: bytes | None = None
    headers: dict[str, str] = field(default_factory=dict)
    timeout: float | None | bool = False
    """False: the client's default; None: no limit (a blocking reward call); a number: seconds."""

    def request_kwargs(self) -> dict[str, Any]:
        kwargs: dict[str, Any] = {"params": self.params, "headers": self.headers}
        if self.json is not None:
            kwargs["json"] = self.json
        if self.content is not None:
            kwargs["content"] = self.content
        if self.timeout is not False:
            kwargs["timeout"] = self.timeout
        return kwargs


@dataclass(frozen=True)
class RetryPolicy:
    """Retry 429/503 up to `attempts` times, waiting what Retry-After says, never more than `max_wait_s`."""

    attempts: int = 5
    max_wait_s: float = 60.0
    default_wait_s: float = 1.0

    def wait_s(self, response: httpx.Response, attempt: int) -> float | None:
        """Seconds to wait before retrying, or None to give up and raise."""
        if response.status_code not in RETRY_STATUSES or attempt >= self.attempts:
            return None
        told = retry_after_s(response.headers.get("retry-after"))
        wait = told if told is not None else self.default_wait_s * 2 ** (attempt - 1)
        return min(max(wait, 0.0), self.max_wait_s)


def retry_after_s(value: str | None) -> float | None:
    """Retry-After is either delay-seconds or an HTTP date (RFC 9110 §10.2.3)."""
    if not value:
        return None
    try:
        return float(value)
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return (when - dt.datetime.now(dt.timezone.utc)).total_seconds()


def raise_for(response: httpx.Response) -> None:
    if response.status_code < 400:
        return
    try:
        body: Any = response.json()
    except ValueError:
        body = response.text
    cls = error_for_status(response.status_code)
    raise cls(response.status_code, body, response.request.method, str(response.request.url),
              retry_after_s(response.headers.get("retry-after")))


def unreachable(base_url: str, exc: httpx.TransportError) -> JudgeUnreachable:
    if isinstance(exc, httpx.TimeoutException):
        reason = f"timed out: {type(exc).__name__}"
    else:
        reason = str(exc) or type(exc).__name__
    return JudgeUnreachable(base_url, reason)


# --- the calls -----------------------------------------------------------------------------------

def _model(cls: type[models.BaseModel]) -> Callable[[httpx.Response], Any]:
    return lambda response: cls.model_validate(response.json())


def _list(cls: type[models.BaseModel]) -> Callable[[httpx.Response], Any]:
    return lambda response: [cls.model_validate(item) for item in response.json()]


def submit(task: str, source: str, *, model: str | None = None, sample_index: int | None = None,
           sampling: Mapping[str, Any] | None = None, tags: Iterable[str] = (),
           idempotency_key: str | None = None, public: bool = False, profile: bool = False) -> Call:
    body: dict[str, Any] = {"task": task, "source": source, "tags": list(tags)}
    if public:
        body["public"] = True
    if profile:
        body["profile"] = True
    for name, value in (("model", model), ("sample_index", sample_index), ("idempotency_key", idempotency_key)):
        if value is not None:
            body[name] = value
    if sampling:
        body["sampling"] = dict(sampling)
    return Call("POST", "/v1/submissions", _model(models.SubmissionAccepted), json=body)


def publish(submission_id: str, public: bool = True) -> Call:
    """Let anyone read the submission's source (or, with False, only its submitter and admins again)."""
    return Call("PATCH", f"/v1/submissions/{submission_id}", _model(models.Submission), json={"public": public})


def submission(submission_id: str) -> Call:
    return Call("GET", f"/v1/submissions/{submission_id}", _model(models.Submission))


def submissions(**filters: Any) -> Call:
    params = {k: v for k, v in filters.items() if v is not None}
    return Call("GET", "/v1/submissions", lambda r: _items(r, models.SubmissionSummary), params=params)


def _items(response: httpx.Response, cls: type[models.BaseModel]) -> list:
    body = response.json()
    items = body.get("items", body.get("submissions", [])) if isinstance(body, dict) else body
    return [cls.model_validate(item) for item in items]


def profile(submission_id: str) -> Call:
    return Call("GET", f"/v1/submissions/{submission_id}/profile", _model(models.SubmissionProfile))


def source(submission_id: str) -> Call:
    """The text exactly as submitted: the route answers JSON unless Accept prefers text/plain."""
    return Call("GET", f"/v1/submissions/{submission_id}/source", lambda r: r.text,
                headers={"accept": "text/plain"})


def tasks() -> Call:
    return Call("GET", "/v1/tasks", _list(models.TaskSummary))


def task(task_id: str) -> Call:
    return Call("GET", f"/v1/tasks/{task_id}", _model(models.Task))


def prompt(task_id: str, language: str | None = None) -> Call:
    params = {"language": language} if language else None
    return Call("GET", f"/v1/tasks/{task_id}/prompt", lambda r: r.text, params=params)


def leaderboard(task_id: str, *, by: str = "submitter", sort: str = "speedup_eager", device: str | None = None,
                limit: int = 100) -> Call:
    params = {"by": by, "sort": sort, "limit": limit, **({"device": device} if device else {})}
    return Call("GET", f"/v1/leaderboard/{task_id}", _model(models.Leaderboard), params=params)


def create_batch(samples: Iterable[Mapping[str, Any] | str], *, name: str | None = None) -> Call:
    """Samples as dicts, or as raw JSONL lines (sent as they are, so malformed lines reach the server and are
    reported there by line number rather than failing here)."""
    lines = [s if isinstance(s, str) else json.dumps(s) for s in samples]
    content = ("\n".join(line.rstrip("\n") for line in lines) + "\n").encode("utf-8")
    return Call("POST", "/v1/batches", _model(models.BatchAccepted), params={"name": name} if name else None,
                content=content, headers={"content-type": "application/x-ndjson"})


def batch(batch_id: str) -> Call:
    return Call("GET", f"/v1/batches/{batch_id}", _model(models.Batch))


def batches(limit: int = 20) -> Call:
    return Call("GET", "/v1/batches", lambda r: _items(r, models.Batch), params={"limit": limit})


def batch_metrics(batch_id: str) -> Call:
    return Call("GET", f"/v1/batches/{batch_id}/metrics", _model(models.BatchMetrics))


def cancel_batch(batch_id: str) -> Call:
    return Call("POST", f"/v1/batches/{batch_id}/cancel", _model(models.Batch))


def results(batch_id: str, fmt: str = "jsonl") -> Call:
    """Streamed: the clients iterate the body instead of parsing it here."""
    return Call("GET", f"/v1/batches/{batch_id}/results", params={"format": fmt}, timeout=None)


def reward(task: str, completions: Iterable[str | Mapping[str, Any]], *, model: str | None = None,
           deadline_s: float | None = None, reward: Mapping[str, Any] | None = None) -> Call:
    body: dict[str, Any] = {"task": task, "completions": [c if isinstance(c, str) else dict(c) for c in completions]}
    if model is not None:
        body["model"] = model
    if deadline_s is not None:
        body["deadline_s"] = deadline_s
    if reward:
        body["reward"] = dict(reward)
    # The server blocks until done or the deadline: let the read last the deadline plus a margin.
    timeout = None if deadline_s is None else deadline_s + 60.0
    return Call("POST", "/v1/rewards", _model(models.Rewards), json=body, timeout=timeout)


__all__ = [
    "DEFAULT_URL",
    "Call",
    "JudgeHTTPError",
    "RetryPolicy",
    "default_key",
    "default_url",
    "raise_for",
    "unreachable",
]
