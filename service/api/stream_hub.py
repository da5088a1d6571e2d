"""One watcher per API process for every open event stream (`GET /v1/submissions/{id}/events`).

Each stream used to read its submission's whole view every `sse_poll_s` (0.5 s) whatever happened: 600 idle
streams took a whole core (issue 41). Now the streams subscribe here, and one task per process watches for
all of them: it wakes when a verdict is announced (service/api/verdict_waits.py) or every `sse_poll_s`, reads
in one transaction the state of the watched jobs and the count of queued jobs (two small queries, however many
streams are open), and loads a submission's full view only when what a stream shows changed: its job's state,
or its queue position, which moves only when the number of queued jobs does. Every subscriber of that
submission gets the one view. An idle stream then costs nothing of its own but a keep-alive line every 15 s.

The hub also counts each key's open streams (`Settings.sse_max_streams_per_key`): a stream is a connection
and a subscription held for up to `sse_max_s`, so one client must not open them without bound.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import logging
from collections.abc import Callable
from dataclasses import dataclass, field

from fastapi.concurrency import run_in_threadpool
from sqlalchemy import func, select

from service import crud
from service.api import schemas
from service.api.verdict_waits import VerdictWaits
from service.db.models import Job
from service.db.session import Database
from service.queue.states import JobState

log = logging.getLogger(__name__)

SUBSCRIBER_BACKLOG = 8
"""Views a subscriber may leave unread; past it the oldest is dropped (only the latest matters to a stream)."""


@dataclass(eq=False)
class Subscription:
    """One open stream: what it follows, and the views the watcher hands it."""

    submission_id: str
    judged_id: str
    """The submission whose job and verdict it shows: itself, or the one it duplicates."""
    views: asyncio.Queue[schemas.SubmissionOut] = field(
        default_factory=lambda: asyncio.Queue(SUBSCRIBER_BACKLOG))

    def wake_keys(self) -> set[str]:
        return {f"s:{self.submission_id}", f"s:{self.judged_id}"}

    def hand(self, view: schemas.SubmissionOut) -> None:
        if self.views.full():
            self.views.get_nowait()
        self.views.put_nowait(view)


class TooManyStreams(Exception):
    """The key already holds its limit of open streams."""

    def __init__(self, limit: int) -> None:
        super().__init__(limit)
        self.limit = limit


@dataclass
class _Seen:
    """What the watcher last saw of a watched submission: its job's state, and the queued count then."""

    state: JobState | None
    queued: int | None


class StreamHub:
    """Per API process: the open streams, grouped by submission, and the one task that watches for them."""

    def __init__(self, db: Database, poll_s: float, public_after: dt.datetime | None,
                 waits: VerdictWaits | None) -> None:
        self._db, self._poll_s, self._public_after, self._waits = db, poll_s, public_after, waits
        self._subs: dict[str, set[Subscription]] = {}
        self._seen: dict[str, _Seen] = {}
        self._open: dict[str, int] = {}
        self._wake = asyncio.Event()
        self._registered: set[str] = set()
        self._task: asyncio.Task[None] | None = None

    # --- the per-key limit ------------------------------------------------------------------------------

    def reserve(self, owner: str, limit: int) -> Callable[[], None]:
        """Count one more stream for `owner`, or raise TooManyStreams; returns the release (safe to call twice)."""
        if self._open.get(owner, 0) >= limit:
            raise TooManyStreams(limit)
        self._open[owner] = self._open.get(owner, 0) + 1
        released = False

        def release() -> None:
            nonlocal released
            if not released:
                released = True
                left = self._open[owner] - 1
                if left:
                    self._open[owner] = left
                else:
                    del self._open[owner]
        return release

    def open_streams(self, owner: str) -> int:
        return self._open.get(owner, 0)

    # --- subscriptions ------------------------------------------------------------------------------------

    def subscribe(self, first: schemas.SubmissionOut) -> Subscription:
        """Follow the submission whose current view (`first`, already sent by the caller) is given."""
        sub = Subscription(first.id, first.duplicate_of or first.id)
        followers = self._subs.setdefault(sub.submission_id, set())
        if not followers:
            self._seen[sub.submission_id] = _Seen(first.stage, None)
        followers.add(sub)
        self._sync_wake_keys()
        if self._task is None or self._task.done():
            self._task = asyncio.get_running_loop().create_task(self._watch(), name="event-stream-watcher")
        self._wake.set()  # its wake-up keys count from now; the next look includes it
        return sub

    def unsubscribe(self, sub: Subscription) -> None:
        followers = self._subs.get(sub.submission_id)
        if followers is None:
            return
        followers.discard(sub)
        if not followers:
            del self._subs[sub.submission_id]
            self._seen.pop(sub.submission_id, None)
        self._sync_wake_keys()

    def _sync_wake_keys(self) -> None:
        if self._waits is None:
            return
        needed = {key for followers in self._subs.values() for sub in followers for key in sub.wake_keys()}
        self._waits.add(needed - self._registered, self._wake)
        self._waits.discard(self._registered - needed, self._wake)
        self._registered = needed

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None

    # --- the watcher --------------------------------------------------------------------------------------

    async def _watch(self) -> None:
        while self._subs:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), self._poll_s)
            self._wake.clear()
            watched = {sid: next(iter(subs)).judged_id for sid, subs in self._subs.items() if subs}
            if not watched:
                break
            seen = {sid: _Seen(s.state, s.queued) for sid, s in self._seen.items()}
            try:
                views, now_seen = await run_in_threadpool(self._look, watched, seen)
            except Exception:  # noqa: BLE001 - a database outage: the streams wait, the next look tries again
                log.warning("event streams: reading the watched submissions failed; trying again in %.1f s",
                            self._poll_s, exc_info=True)
                continue
            for sid, view in views.items():
                for sub in self._subs.get(sid, ()):
                    sub.hand(view)
            for sid, now in now_seen.items():
                if sid in self._seen:
                    self._seen[sid] = now

    def _look(self, watched: dict[str, str], seen: dict[str, _Seen]
              ) -> tuple[dict[str, schemas.SubmissionOut], dict[str, _Seen]]:
        """One read for every watched submission (a thread): the views that changed, and what was seen."""
        with self._db.transaction(read_only=True) as session:
            states = dict(session.execute(select(Job.submission_id, Job.state).where(
                Job.submission_id.in_(set(watched.values())))).all())
            queued = session.scalar(select(func.count()).select_from(Job).where(Job.state == JobState.QUEUED)) or 0
            views: dict[str, schemas.SubmissionOut] = {}
            now_seen: dict[str, _Seen] = {}
            for sid, judged in watched.items():
                state = states.get(judged)
                before = seen.get(sid, _Seen(None, None))
                now_seen[sid] = _Seen(state, queued)
                moved = state is JobState.QUEUED and before.queued != queued
                if state != before.state or moved:
                    view = crud.submission_view(session, sid, self._public_after)
                    if view is not None:
                        views[sid] = view
            return views, now_seen

