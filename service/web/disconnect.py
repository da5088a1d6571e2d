"""Whether the client of a page rendered in a worker thread is still there.

A sync route runs in Starlette's thread pool, where the request's `is_disconnected()` (a coroutine reading the
ASGI receive channel) is reached through the event loop (`anyio.from_thread.run`): a hop of about 0.1 ms, so it
is asked at most every `every_s` of wall time however often the caller checks. Rendering that checks it between
its expensive steps (service/web/highlight.py, between lexer tokens) stops soon after the client hangs up instead
of running to the end of its budget for nobody (issue 41: six views whose clients left after 1 s still took their
full CPU).
"""

from __future__ import annotations

import time

import anyio.from_thread
from starlette.requests import Request

ASK_EVERY_S = 0.05
"""Wall seconds between two questions to the event loop: a hung-up view stops within about this much CPU."""


class ClientGone:
    """A callable answering True once the request's client has disconnected (and from then on)."""

    def __init__(self, request: Request, every_s: float = ASK_EVERY_S) -> None:
        self.request = request
        self.every_s = every_s
        self.gone = False
        self._next = 0.0

    def __call__(self) -> bool:
        now = time.monotonic()
        if self.gone or now < self._next:
            return self.gone
        self._next = now + self.every_s
        self.gone = anyio.from_thread.run(self.request.is_disconnected)
        return self.gone
