"""Event streams share one watcher per process, and each caller may hold only so many (issue 41, point 2).

On SQLite and PostgreSQL, through the real app: N streams on one submission each get its verdict once, while the
database's statements (counted by a SQLAlchemy listener on the app's engine) show one watcher reading for all
of them, not N; the (N+1)th stream of one key answers 429 saying the limit and how to close streams, and a
stream whose client left frees its place at once.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import event

from service.db.session import Database
from service.main import create_app
from tests.service.conftest import new_key, wait_for
from tests.service.test_wakeup import judge_queued
from tests.service.test_worker import submit

STREAMS = 6
LOOKS = 20
"""Watcher reads waited for while the streams are idle: with one stream's reads per stream, N x this."""
LIMIT = STREAMS
"""Each caller's limit of open streams: the anonymous streams of the first test (one address) just fit."""


class Statements:
    """Counts the app's SQL statements by kind: the watcher's state read, and full submission views."""

    def __init__(self) -> None:
        self.watcher = 0
        self.views = 0
        self.lock = threading.Lock()

    def __call__(self, _conn, _cursor, statement: str, *_args) -> None:
        text = " ".join(statement.split()).lower()
        with self.lock:
            if "from jobs where jobs.submission_id in" in text:
                self.watcher += 1
            elif text.startswith("select") and "from submissions" in text and "where submissions.id =" in text:
                self.views += 1


@pytest.fixture
def counted(settings) -> Iterator[tuple[TestClient, Statements]]:
    app = create_app(settings.model_copy(update={"sse_max_streams_per_key": LIMIT}))
    statements = Statements()
    event.listen(app.state.db.engine, "before_cursor_execute", statements)
    with TestClient(app) as test_client:
        yield test_client, statements


def follow(client: TestClient, sub_id: str, started: threading.Semaphore, statuses: list[str],
           headers: dict[str, str] | None = None) -> None:
    with client.stream("GET", f"/v1/submissions/{sub_id}/events", headers=headers or {}) as stream:
        assert stream.status_code == 200, stream.read()
        for line in stream.iter_lines():
            if line.startswith("data:"):
                statuses.append(json.loads(line[5:])["status"])
                if len(statuses) == 1:
                    started.release()


def test_many_streams_on_one_submission_share_one_watcher_and_each_gets_the_verdict_once(db: Database,
                                                                                          counted) -> None:
    client, statements = counted
    (sub_id,) = submit(db)
    started, received = threading.Semaphore(0), [[] for _ in range(STREAMS)]
    # Anonymous, so one viewer: the streams share one view (different viewers get one view per viewer).
    threads = [threading.Thread(target=follow, daemon=True, args=(client, sub_id, started, received[i]))
               for i in range(STREAMS)]
    for thread in threads:
        thread.start()
    for _ in range(STREAMS):
        assert started.acquire(timeout=60), "a stream never sent its first event"
    looks_before, views_before = statements.watcher, statements.views
    wait_for(lambda: statements.watcher >= looks_before + LOOKS, 60, f"{LOOKS} looks of the watcher")
    idle_looks, idle_views = statements.watcher - looks_before, statements.views - views_before
    # One read per look for all the streams (a per-stream poll would be STREAMS per look), and no full view
    # reloaded while nothing changed beyond the first look's (its queue position is read once).
    assert idle_looks < LOOKS + 5
    assert idle_views <= 1, f"{idle_views} submission views read by {idle_looks} looks of idle streams"
    judge_queued(db, 1)
    for thread in threads:
        thread.join(60)
        assert not thread.is_alive(), "a stream did not end at its verdict"
    assert all(statuses.count("done") == 1 and statuses[-1] == "done" for statuses in received), received
    assert all(statuses[0] == "queued" for statuses in received), received


def test_one_key_past_its_limit_of_open_streams_gets_429_and_a_closed_stream_frees_its_place(db: Database,
                                                                                             counted) -> None:
    client, _ = counted
    (sub_id,) = submit(db)
    headers = {"Authorization": f"Bearer {new_key(db, 'busy')}"}
    url = f"/v1/submissions/{sub_id}/events"
    streams = [client.stream("GET", url, headers=headers) for _ in range(LIMIT)]
    opened = [stream.__enter__() for stream in streams]
    try:
        assert all(response.status_code == 200 for response in opened)
        refused = client.get(url, headers=headers)
        assert refused.status_code == 429, refused.text
        detail = refused.json()["detail"]
        assert f"{LIMIT} event streams are already open" in detail
        assert "JUDGE_SSE_MAX_STREAMS_PER_KEY" in detail and "close one by ending its HTTP connection" in detail
        assert refused.headers["Retry-After"]
        other = {"Authorization": f"Bearer {new_key(db, 'someone-else')}"}
        with client.stream("GET", url, headers=other) as theirs:  # the limit is per key, not global
            assert theirs.status_code == 200
        streams.pop().__exit__(None, None, None)  # the client leaves: its place is free at once
        with client.stream("GET", url, headers=headers) as again:
            assert again.status_code == 200
    finally:
        for stream in streams:
            stream.__exit__(None, None, None)
