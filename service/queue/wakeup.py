"""Wake whoever waits on the database the moment it changes, instead of at their next poll.

An idle worker claims on a timer (`Settings.poll_s`, 0.5 s), so on the timer alone a submission posted to it
would wait a quarter of a second on average before its build was even looked up: 0.3-0.4 s of a 3.1-3.5 s
resubmission on the H100 (2026-11-25, `docs/benchmarks.md`). So a transaction that queues jobs says so
(`announce`), and every worker listening (`Listener`) wakes when it commits.

The same carries verdicts the other way: the worker's transaction that stores a verdict announces it on the
`DONE` channel (the submission's id, and its batch's), and the API processes wake the event streams and
`POST /v1/rewards` calls waiting for it (service/api/verdict_waits.py) instead of at their next poll.

A wake-up is a hint, never a claim: the worker still claims through `service.queue.claims` with its leases,
and keeps polling, so a lost or missing wake-up costs only the old latency, and a wake-up with nothing left to
claim costs one empty claim. Nothing is sent when the transaction rolls back.

- PostgreSQL (any number of hosts): `NOTIFY` inside the transaction, which PostgreSQL delivers only on
  commit; each listener LISTENs on a connection of its own, in a thread, and reconnects after an outage.
- SQLite (one host, the embedded default): each listener binds a UNIX datagram socket in a directory named
  after the database file and the channel (`wake_dir`); after the commit the writer sends the payload to every
  socket there and removes those of listeners that are gone. The directory sits under the system's temporary
  directory, whose paths are short enough for socket names wherever the database file lives.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
import socket
import tempfile
import threading
from collections.abc import Callable
from pathlib import Path

from sqlalchemy import event, text
from sqlalchemy.engine import make_url
from sqlalchemy.orm import Session

log = logging.getLogger(__name__)

QUEUED = "judge_queue"
"""Channel: jobs were queued (no payload). Workers listen."""
DONE = "judge_done"
"""Channel: a verdict was stored; payload `s:<submission id>`, and `b:<batch id>` for a batch's. The API listens."""
_PENDING = "judge_wakeup_pending"
"""`Session.info` key: what this SQLite transaction announced; the sockets are told after its commit."""
RECONNECT_S = 5.0
"""How long a PostgreSQL listener waits before listening again after its connection failed (polling goes on)."""


def wake_dir(database_url: str, channel: str) -> Path | None:
    """Where an SQLite database's listeners on `channel` keep their sockets; None for an in-memory database."""
    url = make_url(database_url)
    if url.get_backend_name() != "sqlite" or not url.database or url.database == ":memory:":
        return None
    digest = hashlib.sha256(str(Path(url.database).resolve()).encode()).hexdigest()[:16]
    return Path(tempfile.gettempdir()) / "kernel-judge-wake" / digest / channel


def announce(session: Session, channel: str = QUEUED, payload: str = "") -> None:
    """Say, inside the caller's transaction, what it did: the channel's listeners hear it when it commits."""
    bind = session.get_bind()
    if bind.dialect.name == "postgresql":
        session.execute(text("SELECT pg_notify(:channel, :payload)"), {"channel": channel, "payload": payload})
        return
    directory = wake_dir(str(bind.url), channel)
    if directory is not None:
        session.info.setdefault(_PENDING, []).append((directory, payload))


@event.listens_for(Session, "after_commit")
def _after_commit(session: Session) -> None:
    for directory, payload in session.info.pop(_PENDING, ()):
        _tell_sockets(directory, payload)


@event.listens_for(Session, "after_rollback")
def _after_rollback(session: Session) -> None:
    session.info.pop(_PENDING, None)


def _tell_sockets(directory: Path, payload: str) -> None:
    """The payload to every listener's socket; a socket nobody reads any more (its process died) is removed."""
    if not directory.is_dir():
        return
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sender:
        sender.setblocking(False)
        for entry in os.scandir(directory):
            try:
                sender.sendto(b"!" + payload.encode(), entry.path)  # never empty: "!" leads
            except (ConnectionRefusedError, FileNotFoundError):
                with contextlib.suppress(OSError):
                    os.unlink(entry.path)
            except OSError:  # BlockingIOError: that listener is behind; its poll will see the change
                pass


class Listener:
    """Calls `heard(payload)`, in a thread of its own, for each announcement on `channel`; `close` stops it."""

    def __init__(self, database_url: str, name: str, channel: str, heard: Callable[[str], None]) -> None:
        self.url = database_url
        self.channel = channel
        self.heard = heard
        self.ready = threading.Event()
        """Set once wake-ups can arrive (the socket bound, or LISTEN done): what is announced before may be missed."""
        self._stop = threading.Event()
        self._socket: socket.socket | None = None
        self._path: Path | None = None
        digest = hashlib.sha256(name.encode()).hexdigest()[:12]
        if make_url(database_url).get_backend_name() == "postgresql":
            target = self._listen_postgresql
        else:
            directory = wake_dir(database_url, channel)
            try:
                if directory is None:
                    raise OSError("an in-memory database has no other process to hear from")
                directory.mkdir(parents=True, exist_ok=True)
                self._path = directory / f"{digest}.sock"
                with contextlib.suppress(FileNotFoundError):
                    self._path.unlink()
                self._socket = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
                self._socket.bind(str(self._path))
            except OSError as exc:  # no wake-ups, only the poll: slower, never wrong
                log.warning("wake-up listener not started (%s): polling only", exc)
                self._path, self._thread = None, None
                return
            self._socket.settimeout(1.0)  # to notice `close`
            self.ready.set()
            target = self._listen_socket
        self._thread = threading.Thread(target=target, name="wakeup", daemon=True)
        self._thread.start()

    def _listen_socket(self) -> None:
        assert self._socket is not None
        while not self._stop.is_set():
            try:
                payload = self._socket.recv(4096)
            except TimeoutError:
                continue
            except OSError:
                return  # closed
            self.heard(payload[1:].decode(errors="replace"))

    def _listen_postgresql(self) -> None:
        import psycopg

        dsn = make_url(self.url).set(drivername="postgresql").render_as_string(hide_password=False)
        while not self._stop.is_set():
            try:
                with psycopg.connect(dsn, autocommit=True) as conn:
                    conn.execute(f"LISTEN {self.channel}")
                    self.ready.set()
                    while not self._stop.is_set():
                        for notification in conn.notifies(timeout=1.0, stop_after=1):
                            self.heard(notification.payload)
            except psycopg.Error as exc:
                log.warning("wake-up listener: %s; polling only, listening again in %.0f s", exc, RECONNECT_S)
                self._stop.wait(RECONNECT_S)

    def close(self) -> None:
        self._stop.set()
        if self._socket is not None:
            self._socket.close()
        if self._path is not None:
            with contextlib.suppress(FileNotFoundError):
                self._path.unlink()
        # Not joined: the thread sees the stop within its 1 s receive timeout and ends on its own (a daemon, its
        # PostgreSQL connection closed by its `with`); waiting for it would add that second to every shutdown.
