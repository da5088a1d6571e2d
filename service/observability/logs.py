"""Log formatting: `JUDGE_LOG_FORMAT=json` (one JSON object a line, for log collectors) or `text`.

Records carry the job and submission they are about: a worker sets them for the current thread with
`job_context(...)` (a contextvar, so each compile/execute thread has its own), and `JobContextFilter`
copies them onto every record, so `grep submission_id` finds a submission's whole story in the logs.
"""

from __future__ import annotations

import contextlib
import contextvars
import datetime as dt
import json
import logging
import os
from collections.abc import Iterator

_job: contextvars.ContextVar[dict[str, object] | None] = contextvars.ContextVar("judge_job", default=None)

CONTEXT_FIELDS = ("job_id", "submission_id", "task_id", "worker_id")


@contextlib.contextmanager
def job_context(**fields: object) -> Iterator[None]:
    """Attach `fields` (job_id, submission_id, ...) to every record logged by this thread inside the block."""
    token = _job.set({**(_job.get() or {}), **fields})
    try:
        yield
    finally:
        _job.reset(token)


class JobContextFilter(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        for key, value in (_job.get() or {}).items():
            if not hasattr(record, key):
                setattr(record, key, value)
        return True


class JsonFormatter(logging.Formatter):
    """time, level, logger, message, the job context, and any `extra=` fields, as one JSON object."""

    _STANDARD = set(vars(logging.LogRecord("", 0, "", 0, "", None, None))) | {"message", "asctime"}

    def format(self, record: logging.LogRecord) -> str:
        out: dict[str, object] = {
            "time": dt.datetime.fromtimestamp(record.created, dt.timezone.utc).isoformat(timespec="milliseconds"),
            "level": record.levelname, "logger": record.name, "message": record.getMessage(),
        }
        for key, value in vars(record).items():
            if key not in self._STANDARD and not key.startswith("_"):
                out[key] = value
        if record.exc_info:
            out["exception"] = self.formatException(record.exc_info)
        return json.dumps(out, default=str)


class TextFormatter(logging.Formatter):
    """The plain format, with `[job 12 sub ab12cd34]` when the record is about a job."""

    def __init__(self) -> None:
        super().__init__("%(asctime)s %(levelname)s %(name)s: %(message)s")

    def format(self, record: logging.LogRecord) -> str:
        line = super().format(record)
        job, sub = getattr(record, "job_id", None), getattr(record, "submission_id", None)
        return f"{line} [job {job} sub {sub}]" if job is not None else line


def configure_logging(level: str | None = None, fmt: str | None = None) -> None:
    """Configure the root logger from JUDGE_LOG_LEVEL and JUDGE_LOG_FORMAT (json|text; default text)."""
    level = level or os.environ.get("JUDGE_LOG_LEVEL", "INFO")
    fmt = (fmt or os.environ.get("JUDGE_LOG_FORMAT", "text")).lower()
    handler = logging.StreamHandler()
    handler.setFormatter(JsonFormatter() if fmt == "json" else TextFormatter())
    handler.addFilter(JobContextFilter())
    logging.basicConfig(level=level, handlers=[handler], force=True)
