"""Whether the database can store: a full disk and a read-only database, told apart from an outage and named.

A write refused for want of space (SQLite's SQLITE_FULL, "database or disk is full"; PostgreSQL's SQLSTATE 53100
disk_full) or because the database is read-only (SQLITE_READONLY, "attempt to write a readonly database";
PostgreSQL's 25006 read_only_sql_transaction, a standby or `default_transaction_read_only`) is not an outage:
retrying in five seconds does not help, and an operator must act. So the API answers it as what it is (507 for
the full disk, 503 naming the read-only database), the log says it once when it starts, and /readyz fails while
it lasts: `Database.transaction` records the fault, and the next write that commits clears it. A process that
cannot store at start (`serve`, `worker`, `migrate`) refuses to start with one line naming the database and the
cause (`sqlite_unwritable`, `start_failure`), not a traceback.
"""

from __future__ import annotations

import enum
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from sqlalchemy.engine import URL, make_url
from sqlalchemy.exc import DBAPIError

FAULT_HOLD_S = 300.0
"""How long /readyz fails after the last refused write when no write has committed since: long enough for a
load balancer to route around the process, short enough that an idle process that was fixed comes back."""

_SQLITE_FULL = 13
_SQLITE_READONLY = 8
_DISK_FULL_SQLSTATE = "53100"
_READ_ONLY_SQLSTATE = "25006"


class StorageFault(str, enum.Enum):
    DISK_FULL = "disk full"
    READ_ONLY = "read-only"


MESSAGES = {
    StorageFault.DISK_FULL: "the database's disk is full: nothing new can be stored until an operator frees space "
                            "(reads still work); retrying will not help before then",
    StorageFault.READ_ONLY: "the database is read-only (a read-only file or directory, or a PostgreSQL standby or "
                            "read-only setting): nothing new can be stored until an operator makes it writable "
                            "(reads still work)",
}
STATUS = {StorageFault.DISK_FULL: 507, StorageFault.READ_ONLY: 503}


def classify(exc: BaseException) -> StorageFault | None:
    """The storage fault a driver error reports, or the errors it was raised while handling (a fault rolls SQLite's
    transaction back, so the savepoint rollback that follows fails with "no such savepoint" and hides it); None
    for anything else."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        fault = _fault_of(current)
        if fault is not None:
            return fault
        current = current.__cause__ or current.__context__
    return None


def _fault_of(exc: BaseException) -> StorageFault | None:
    orig = exc.orig if isinstance(exc, DBAPIError) else exc
    code = getattr(orig, "sqlite_errorcode", None)
    if code is not None:
        primary = code & 0xFF  # extended result codes carry the primary one in their low byte
        return {_SQLITE_FULL: StorageFault.DISK_FULL, _SQLITE_READONLY: StorageFault.READ_ONLY}.get(primary)
    sqlstate = getattr(orig, "sqlstate", None)
    return {_DISK_FULL_SQLSTATE: StorageFault.DISK_FULL, _READ_ONLY_SQLSTATE: StorageFault.READ_ONLY}.get(sqlstate)


@dataclass(frozen=True)
class Seen:
    """A refused write: which fault, the driver's words, and when (time.monotonic)."""

    fault: StorageFault
    error: str
    at: float

    def current(self, now: float | None = None) -> bool:
        return (now if now is not None else time.monotonic()) - self.at < FAULT_HOLD_S


def where(url: str | URL) -> str:
    """The database named without credentials: SQLite's file, or PostgreSQL's host, port and database."""
    parsed = make_url(url)
    if parsed.get_backend_name() == "sqlite":
        return f"SQLite file {parsed.database}"
    return f"PostgreSQL {parsed.host}:{parsed.port or 5432}/{parsed.database}"


def sqlite_unwritable(path: Path) -> str | None:
    """Why a SQLite database at `path` could not store, or None: its directory must take new files (SQLite
    creates its -wal and -shm files there, even to read) and the file, when present, must open for writing.
    Checked by doing it, not by permission bits (root passes those on a read-only file system)."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=path.parent):
            pass
    except OSError as exc:
        return f"its directory {path.parent} takes no new file: {exc.strerror or exc}"
    try:
        if path.exists():
            with path.open("r+b"):
                pass
    except OSError as exc:
        return f"the file does not open for writing: {exc.strerror or exc}"
    return None


def start_failure(where: str, exc: BaseException) -> str:
    """One line for a process that cannot start on its database: which database, and why."""
    fault = classify(exc)
    cause = str(exc.orig if isinstance(exc, DBAPIError) else exc).strip().splitlines()[0][:300]
    return f"cannot use the database ({where}): {fault.value + ': ' if fault else ''}{cause}"
