"""Requests that wait for verdicts wake when one is stored, instead of at their next poll.

Polling alone (`GET /v1/submissions/{id}/events` every `sse_poll_s`, 0.5 s; `POST /v1/rewards` every
`rewards_poll_s`, 0.25 s) would bring a verdict to its waiting client an eighth to a quarter of a second late on
average. So the worker's transaction that stores a verdict announces it (service/queue/wakeup.py, channel
`DONE`, payloads `s:<submission id>` and `b:<batch id>`); one listener per API process hands each announcement
to the event loop, which wakes the requests waiting for that key. They then read the database as a poll does: the
announcement says only where to look, and the poll stays for what is not announced (stage changes, a
cancelled batch) and for an announcement lost in an outage.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import uuid
from collections.abc import Iterable

from service.queue import wakeup


class VerdictWaits:
    """Per API process: the keys requests wait on, and the listener that wakes them."""

    def __init__(self) -> None:
        self._waiting: dict[str, set[asyncio.Event]] = {}
        self._loop: asyncio.AbstractEventLoop | None = None
        self._listener: wakeup.Listener | None = None

    def start(self, database_url: str) -> None:
        """Listen for stored verdicts; call from the event loop that serves the requests (the app's lifespan)."""
        self._loop = asyncio.get_running_loop()
        name = f"api-{os.getpid()}-{uuid.uuid4().hex[:8]}"
        self._listener = wakeup.Listener(database_url, name, wakeup.DONE, self._heard)

    def close(self) -> None:
        if self._listener is not None:
            self._listener.close()
            self._listener = None

    def _heard(self, payload: str) -> None:  # the listener's thread
        loop = self._loop
        if loop is not None and not loop.is_closed():
            with contextlib.suppress(RuntimeError):  # the loop closed in between: nobody waits any more
                loop.call_soon_threadsafe(self._wake, payload)

    def _wake(self, payload: str) -> None:  # the event loop
        for event in self._waiting.get(payload, ()):
            event.set()

    def add(self, keys: Iterable[str], event: asyncio.Event) -> None:
        """Set `event` whenever a verdict for one of `keys` is announced, until `discard`."""
        for key in keys:
            self._waiting.setdefault(key, set()).add(event)

    def discard(self, keys: Iterable[str], event: asyncio.Event) -> None:
        for key in keys:
            waiters = self._waiting.get(key)
            if waiters is not None:
                waiters.discard(event)
                if not waiters:
                    del self._waiting[key]

    async def wait(self, keys: Iterable[str], timeout_s: float) -> None:
        """Return when a verdict for one of `keys` is announced, or after `timeout_s` (the poll)."""
        event = asyncio.Event()
        keys = list(keys)
        self.add(keys, event)
        try:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(event.wait(), timeout_s)
        finally:
            self.discard(keys, event)

async def wait_for_verdict(waits: VerdictWaits | None, keys: Iterable[str], timeout_s: float) -> None:
    """`waits.wait`, or a plain sleep where the app runs without its lifespan (`deps.get_verdict_waits`)."""
    if waits is None:
        await asyncio.sleep(timeout_s)
    else:
        await waits.wait(keys, timeout_s)
