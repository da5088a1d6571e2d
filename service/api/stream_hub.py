"""One watcher per API process for every open event stream (`GET /v1/submissions/{id}/events`).

Each stream used to read its submission's whole view every `sse_poll_s` (0.5 s) whatever happened: 600 idle
streams took a whole core (issue 41). Now the streams subscribe here, and one task per process watches for
all of them: it wakes when a verdict is announced (service/api/verdict_waits.py) or every `sse_poll_s`, reads
in one transaction the state of the watched jobs and the count of queued jobs (two small queries, however many
streams are open), and loads a submission's full view only when what a stream shows changed: its job's state,
or its queue position, which moves only when the number of queued jobs does. The subscribers of
a submission with the same viewer share one view. An idle stream costs nothing of its own but a keep-alive
line every 15 s.

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
from sqlalchemy.orm import Session

from service import crud
from service.api import schemas
from service.api.verdict_waits import VerdictWaits
from service.db.models import Job
from service.db.session import Database
from service.queue.states import JobState
from service.visibility import Viewer

log = logging.getLogger(__name__)

Group = tuple[str, Viewer]
"""Streams that share one view: the submission they follow, and who asks."""
SUBSCRIBER_BACKLOG = 8
"""Views a subscriber may leave unread; past it the oldest is dropped (only the latest matters to a stream)."""


@dataclass(eq=False)
class Subscription:
    """One open stream: what it follows, and the views the watcher hands it."""

    submission_id: str
    judged_id: str
    """The submission whose job and verdict it shows: itself, or the one it duplicates."""
    viewer: Viewer
    """Who asks: streams share a view only with those who may see the same (service/visibility.py)."""
    views: asyncio.Queue[schemas.SubmissionOut] = field(
        default_factory=lambda: asyncio.Queue(SUBSCRIBER_BACKLOG))

    @property
    def group(self) -> Group:
        return self.submission_id, self.viewer

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
        self._subs: dict[Group, set[Subscription]] = {}
        self._seen: dict[Group, _Seen] = {}
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

    def subscribe(self, first: schemas.SubmissionOut, viewer: Viewer) -> Subscription:
        """Follow, as `viewer`, the submission whose current view (`first`, already sent by the caller) is given."""
        sub = Subscription(first.id, first.duplicate_of or first.id, viewer)
        followers = self._subs.setdefault(sub.group, set())
        if not followers:
            self._seen[sub.group] = _Seen(first.stage, None)
        followers.add(sub)
        self._sync_wake_keys()
        if self._task is None or self._task.done():
            self._task = asyncio.get_running_loop().create_task(self._watch(), name="event-stream-watcher")
        self._wake.set()  # its wake-up keys count from now; the next look includes it
        return sub

    def unsubscribe(self, sub: Subscription) -> None:
        followers = self._subs.get(sub.group)
        if followers is None:
            return
        followers.discard(sub)
        if not followers:
            del self._subs[sub.group]
            self._seen.pop(sub.group, None)
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
            watched = {group: next(iter(subs)).judged_id for group, subs in self._subs.items() if subs}
            if not watched:
                break
            seen = {group: _Seen(s.state, s.queued) for group, s in self._seen.items()}
            try:
                views, now_seen = await run_in_threadpool(self._look, watched, seen)
            except Exception:  # noqa: BLE001 - a database outage: the streams wait, the next look tries again
                log.warning("event streams: reading the watched submissions failed; trying again in %.1f s",
                            self._poll_s, exc_info=True)
                continue
            for group, view in views.items():
                for sub in self._subs.get(group, ()):
                    sub.hand(view)
            for group, now in now_seen.items():
                if group in self._seen:
                    self._seen[group] = now

    def _look(self, watched: dict[Group, str], seen: dict[Group, _Seen]
              ) -> tuple[dict[Group, schemas.SubmissionOut], dict[Group, _Seen]]:
        """One read for every watched submission (a thread): the views that changed, and what was seen."""
        with self._db.transaction(read_only=True) as session:
            states = dict(session.execute(select(Job.submission_id, Job.state).where(
                Job.submission_id.in_(set(watched.values())))).all())
            queued = session.scalar(select(func.count()).select_from(Job).where(Job.state == JobState.QUEUED)) or 0
            views: dict[Group, schemas.SubmissionOut] = {}
            now_seen: dict[Group, _Seen] = {}
            for group, judged in watched.items():
                state = states.get(judged)
                before = seen.get(group, _Seen(None, None))
                now_seen[group] = _Seen(state, queued)
                moved = state is JobState.QUEUED and before.queued != queued
                if state != before.state or moved:
                    view = self._view(session, *group)
                    if view is not None:
                        views[group] = view
            return views, now_seen

    def _view(self, session: Session, submission_id: str, viewer: Viewer) -> schemas.SubmissionOut | None:
        """The submission's view as `viewer` may see it; each group of streams gets its own."""
        return crud.submission_view(session, submission_id, self._public_after, viewer)

