"""The errors a client call can raise, as one tree users can catch.

    JudgeError
    ├── JudgeUnreachable        nothing answers at the URL (refused, DNS, TLS) or the request timed out
    └── JudgeHTTPError          the server answered with an error status; carries its message and body
        ├── InvalidRequest      400, 409, 413, 415, 422: the request or candidate was refused as sent
        ├── AuthError           401, 403: no key, an unknown or revoked key, admin routes disabled
        ├── NotFound            404: unknown submission, batch or task
        ├── Busy                429, 503 after the retries: rate limit, queue quota, or a server not ready
        └── ServerError         500 and other 5xx: the judge failed, not the caller

`WaitTimeout` is raised by the `wait*` helpers when their deadline passes before the work is done.
"""

from __future__ import annotations

from typing import Any


class JudgeError(Exception):
    """Base of every error the client raises on purpose."""


class JudgeUnreachable(JudgeError):
    def __init__(self, url: str, reason: str) -> None:
        self.url = url
        self.reason = reason
        super().__init__(f"no judge at {url} ({reason}); start one with `kernel-judge serve` or set JUDGE_URL")


class WaitTimeout(JudgeError):
    """The thing waited for was not done by the deadline; it keeps going on the server."""


def _message(body: Any, fallback: str) -> str:
    """The server's message: FastAPI's `detail` (a string, or {"message": ..., fields}), plus the fields a
    person needs to act on (e.g. `valid_task_ids`), whether inside `detail` or beside it."""
    if not isinstance(body, dict):
        return body.strip()[:500] if isinstance(body, str) and body.strip() else fallback
    detail = body.get("detail", body)
    extras = {k: v for k, v in body.items() if k != "detail"} if "detail" in body else {}
    if isinstance(detail, dict):
        extras = {**{k: v for k, v in detail.items() if k != "message"}, **extras}
        text = str(detail.get("message") or fallback)
    elif isinstance(detail, list) and detail and isinstance(detail[0], dict):  # FastAPI's validation errors
        first = detail[0]
        text = f"{first.get('msg', 'invalid')} at {'.'.join(map(str, first.get('loc', [])))}"
    else:
        text = str(detail) if detail else fallback
    for name, value in extras.items():
        if name in ("errors", "rejected") or value in (None, [], {}, ""):
            continue  # long lists: callers read them from `body`
        shown = ", ".join(map(str, value)) if isinstance(value, list) else value
        text += f" ({name}: {shown})"
    return text


class JudgeHTTPError(JudgeError):
    """The server answered `status_code`; `message` is its explanation, `body` the parsed JSON (or text)."""

    def __init__(self, status_code: int, body: Any, method: str, url: str, retry_after: float | None = None) -> None:
        self.status_code = status_code
        self.body = body
        self.method = method
        self.url = url
        self.retry_after = retry_after
        self.message = _message(body, f"HTTP {status_code}")
        super().__init__(f"{status_code} from {method} {url}: {self.message}")


class InvalidRequest(JudgeHTTPError):
    pass


class AuthError(JudgeHTTPError):
    pass


class NotFound(JudgeHTTPError):
    pass


class Busy(JudgeHTTPError):
    pass


class ServerError(JudgeHTTPError):
    pass


def error_for_status(status_code: int) -> type[JudgeHTTPError]:
    if status_code in (401, 403):
        return AuthError
    if status_code == 404:
        return NotFound
    if status_code in (429, 503):
        return Busy
    if status_code >= 500:
        return ServerError
    return InvalidRequest
