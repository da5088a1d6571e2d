"""Exit codes of `kernel-judge`, defined once, so scripts can branch on what went wrong."""

import enum

from service.client import errors


class ExitCode(enum.IntEnum):
    OK = 0
    NOT_CORRECT = 1
    USAGE = 2
    UNREACHABLE = 3
    AUTH = 4
    NOT_FOUND = 5
    REJECTED = 6
    BUSY = 7
    SERVER_ERROR = 8
    WAIT_TIMEOUT = 9
    LOCAL_ERROR = 10
    INTERRUPTED = 130


_BY_ERROR: list[tuple[type[Exception], ExitCode]] = [
    (errors.JudgeUnreachable, ExitCode.UNREACHABLE),
    (errors.AuthError, ExitCode.AUTH),
    (errors.NotFound, ExitCode.NOT_FOUND),
    (errors.InvalidRequest, ExitCode.REJECTED),
    (errors.Busy, ExitCode.BUSY),
    (errors.ServerError, ExitCode.SERVER_ERROR),
    (errors.WaitTimeout, ExitCode.WAIT_TIMEOUT),
]


def for_error(exc: Exception) -> ExitCode:
    for cls, code in _BY_ERROR:
        if isinstance(exc, cls):
            return code
    return ExitCode.LOCAL_ERROR


def help_text() -> str:
    """The table shown at the end of `kernel-judge --help`."""
    rows = [f"{code.value:>3}  {code.name.lower().replace('_', ' ')}: {_doc(code)}" for code in ExitCode]
    return "Exit codes:\n\n" + "\n\n".join(rows)


def _doc(code: ExitCode) -> str:
    docs = {
        ExitCode.OK: "success",
        ExitCode.NOT_CORRECT: "the verdict waited for (submit --wait) is not correct",
        ExitCode.USAGE: "bad flags or arguments",
        ExitCode.UNREACHABLE: "no judge at the URL (start one with `kernel-judge serve`, or set JUDGE_URL)",
        ExitCode.AUTH: "missing, unknown or revoked API key (JUDGE_API_KEY)",
        ExitCode.NOT_FOUND: "unknown submission, batch or task",
        ExitCode.REJECTED: "the server refused the request as sent (invalid, too large, conflict)",
        ExitCode.BUSY: "rate limited or server busy after retries",
        ExitCode.SERVER_ERROR: "the server failed",
        ExitCode.WAIT_TIMEOUT: "--timeout passed; the work continues on the server",
        ExitCode.LOCAL_ERROR: "a local file or the generation endpoint failed",
        ExitCode.INTERRUPTED: "interrupted (Ctrl-C)",
    }
    return docs[code]
