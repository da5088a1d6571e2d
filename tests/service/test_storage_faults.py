"""A full disk and a read-only database are named as such (service/db/storage.py): the refused write answers 507
(disk full) or 503 (read-only) saying which, without a Retry-After; one log line says it when it starts; /readyz
fails while it lasts; reads keep working; the first write that commits afterwards makes the service ready again.

The faults are the databases' own, on the app's real engine: SQLite's `max_page_count` at the file's current size
(the engine then fails with SQLITE_FULL, "database or disk is full", as on a full disk) and `query_only`
(SQLITE_READONLY, as for a read-only file); PostgreSQL's `default_transaction_read_only` (25006, as on a standby).
PostgreSQL's disk_full (53100) cannot be caused here without filling a disk: its classification is tested on the
driver's own exception.
"""

from __future__ import annotations

import logging

import psycopg
import pytest
from sqlalchemy import event
from sqlalchemy.exc import OperationalError

from service.db import storage
from tests.service.conftest import CORRECT_KL_DIV

SOURCE = CORRECT_KL_DIV.read_text() + "# padding to need new pages\n" * 4000
"""About 120 KB: more pages than the SQLite file has free."""


def _fault_sql(engine, fault: storage.StorageFault) -> list[str]:  # noqa: ANN001
    if engine.dialect.name != "sqlite":
        return ["SET default_transaction_read_only = on"]
    if fault is storage.StorageFault.READ_ONLY:
        return ["PRAGMA query_only = ON"]
    with engine.connect() as conn:
        pages = conn.exec_driver_sql("PRAGMA page_count").scalar()
    return [f"PRAGMA max_page_count = {pages}"]


def _impose(engine, statements: list[str]):  # noqa: ANN001, ANN202
    """Every new connection of the app's engine gets the fault; returns what lifts it."""
    def on_connect(dbapi_conn, _record) -> None:  # noqa: ANN001
        cur = dbapi_conn.cursor()
        for sql in statements:
            cur.execute(sql)
        cur.close()
        if engine.dialect.name != "sqlite":
            dbapi_conn.commit()

    event.listen(engine, "connect", on_connect)
    engine.dispose()

    def lift() -> None:
        event.remove(engine, "connect", on_connect)
        engine.dispose()
    return lift


def _faults(db_url: str) -> list[storage.StorageFault]:
    return list(storage.StorageFault) if db_url.startswith("sqlite") else [storage.StorageFault.READ_ONLY]


def test_a_refused_write_is_named_logged_and_fails_readyz_until_a_write_commits(client, auth, db_url, caplog):
    engine = client.app.state.db.engine
    for fault in _faults(db_url):
        caplog.clear()
        lift = _impose(engine, _fault_sql(engine, fault))
        with caplog.at_level(logging.ERROR, logger="service.db.session"):
            refused = [client.post("/v1/submissions", json={"task": "kl_div", "source": SOURCE}, headers=auth)
                       for _ in range(2)]
        for answer in refused:
            assert answer.status_code == storage.STATUS[fault], answer.text
            assert answer.json()["storage_fault"] == fault.value and "Retry-After" not in answer.headers
            words = "disk is full" if fault is storage.StorageFault.DISK_FULL else "read-only"
            assert words in answer.json()["detail"]
        lines = [r.getMessage() for r in caplog.records if "refused a write" in r.getMessage()]
        assert len(lines) == 1 and fault.value in lines[0], lines  # said once when it starts, not per request
        ready = client.get("/readyz")
        assert ready.status_code == 503 and ready.json()["status"] == fault.value, ready.text
        assert client.get("/v1/tasks").status_code == 200  # reads still work
        assert client.get("/v1/submissions", headers=auth).status_code == 200

        lift()
        stored = client.post("/v1/submissions", json={"task": "kl_div", "source": SOURCE}, headers=auth)
        assert stored.status_code == 202, stored.text
        assert client.get("/readyz").status_code == 200


@pytest.mark.parametrize("db_url", ["sqlite"], indirect=True)
def test_postgresql_disk_full_and_other_errors_are_told_apart(db_url):
    def wrapped(orig: Exception) -> OperationalError:
        return OperationalError("INSERT INTO submissions ...", {}, orig)

    assert storage.classify(wrapped(psycopg.errors.DiskFull("could not extend file: No space left on device"))) \
        is storage.StorageFault.DISK_FULL
    assert storage.classify(wrapped(psycopg.errors.ReadOnlySqlTransaction("cannot execute INSERT in a read-only "
                                                                          "transaction"))) \
        is storage.StorageFault.READ_ONLY
    assert storage.classify(wrapped(psycopg.errors.AdminShutdown("terminating connection"))) is None
    assert storage.classify(ValueError("not a driver error")) is None
