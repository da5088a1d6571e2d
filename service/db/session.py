"""Engine and session factory for SQLite (default) and PostgreSQL.

SQLite is configured for a small multi-process service: WAL (readers never block the writer),
a busy timeout (writers queue instead of failing), and `BEGIN IMMEDIATE` for transactions that
write, so a read-then-write transaction takes the write lock up front instead of failing to
upgrade it. Read-only sessions (`read_only=True`) use a plain deferred BEGIN and never wait.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from contextlib import contextmanager

from sqlalchemy import Engine, create_engine, event
from sqlalchemy.exc import DBAPIError
from sqlalchemy.orm import Session, sessionmaker

from service.db import storage

log = logging.getLogger(__name__)

SQLITE_BUSY_TIMEOUT_MS = 30_000
"""How long a SQLite writer waits for the lock. Write transactions here last milliseconds."""


def is_sqlite(url: str) -> bool:
    return url.startswith("sqlite")


def make_engine(url: str) -> Engine:
    if not is_sqlite(url):
        return create_engine(url, pool_pre_ping=True, pool_size=10, max_overflow=20)
    engine = create_engine(url, connect_args={"timeout": SQLITE_BUSY_TIMEOUT_MS / 1000, "check_same_thread": False})

    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_conn, _record) -> None:  # noqa: ANN001
        dbapi_conn.isolation_level = None  # we issue BEGIN ourselves (below)
        cur = dbapi_conn.cursor()
        cur.execute("PRAGMA journal_mode=WAL")
        cur.execute(f"PRAGMA busy_timeout={SQLITE_BUSY_TIMEOUT_MS}")
        cur.execute("PRAGMA synchronous=NORMAL")
        cur.execute("PRAGMA foreign_keys=ON")
        cur.close()

    @event.listens_for(engine, "begin")
    def _on_begin(conn) -> None:  # noqa: ANN001
        mode = "DEFERRED" if conn.get_execution_options().get("read_only") else "IMMEDIATE"
        conn.exec_driver_sql(f"BEGIN {mode}")

    return engine


class Database:
    """One engine and its session factories; create one per process."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.engine = make_engine(url)
        self.sqlite = is_sqlite(url)
        self._sessions = sessionmaker(self.engine, expire_on_commit=False)
        self._read_sessions = sessionmaker(self.engine.execution_options(read_only=True), expire_on_commit=False)
        self.storage_fault: storage.Seen | None = None
        """The last write refused for a full disk or a read-only database, until a write commits."""


    def session(self, *, read_only: bool = False) -> Session:
        return (self._read_sessions if read_only else self._sessions)()

    @contextmanager
    def transaction(self, *, read_only: bool = False) -> Iterator[Session]:
        """A session in one transaction: committed on success, rolled back on error. A write refused for a full
        disk or a read-only database is recorded (`storage_fault`, logged when it starts); a write that commits
        clears it."""
        try:
            with self.session(read_only=read_only) as session, session.begin():
                yield session
        except DBAPIError as exc:
            self._note_refused(exc)
            raise
        if not read_only and self.storage_fault is not None:
            log.warning("the database stores again (after: %s)", self.storage_fault.fault.value)
            self.storage_fault = None

    def _note_refused(self, exc: DBAPIError) -> None:
        fault = storage.classify(exc)
        if fault is None:
            return
        if self.storage_fault is None or self.storage_fault.fault is not fault or not self.storage_fault.current():
            log.error("the database refused a write: %s (%s): %s", fault.value, storage.where(self.url),
                      str(exc.orig)[:300])
        self.storage_fault = storage.Seen(fault, str(exc.orig)[:500], time.monotonic())

    def dispose(self) -> None:
        self.engine.dispose()
