"""The Python client of the judge's HTTP API: `JudgeClient` (blocking) and `AsyncJudgeClient` (asyncio).

Both read JUDGE_URL (default http://127.0.0.1:8000) and JUDGE_API_KEY when not given a URL and key, return
the typed views of `service.client.models`, retry 429/503 as Retry-After says, and raise the errors of
`service.client.errors`. Importing this package does not import torch.
"""

from service.client.aio import AsyncJudgeClient
from service.client.calls import DEFAULT_URL, RetryPolicy
from service.client.errors import (
    AuthError,
    Busy,
    InvalidRequest,
    JudgeError,
    JudgeHTTPError,
    JudgeUnreachable,
    NotFound,
    ServerError,
    WaitTimeout,
)
from service.client.sync import JudgeClient

__all__ = [
    "DEFAULT_URL",
    "AsyncJudgeClient",
    "AuthError",
    "Busy",
    "InvalidRequest",
    "JudgeClient",
    "JudgeError",
    "JudgeHTTPError",
    "JudgeUnreachable",
    "NotFound",
    "RetryPolicy",
    "ServerError",
    "WaitTimeout",
]
