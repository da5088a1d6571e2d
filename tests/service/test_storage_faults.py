"""A full disk and a read-only database are named as such (service/db/storage.py): the refused write answers 507
(disk full) or 503 (read-only) saying which, without a Retry-After; one log line says it when it starts; /readyz
fails while it lasts; reads keep working; the first write that commits afterwards makes the service ready again.

The faults are the databases' own, on the app's real engine: SQLite's `max_page_count` at the file's current size
(the engine then fails with SQLITE_FULL, "database or disk is full", as on a full disk) and `query_only`
(SQLITE_READONLY, as for a read-only file); PostgreSQL's `default_transaction_read_only` (25006, as on a standby).
PostgreSQL's disk_full (53100) cannot be caused here without filling a disk: its classification is tested on the
driver's own exception. `serve` on a read-only directory (a read-only bind mount in a private mount namespace) or
on a PostgreSQL that does not answer refuses to start with one line naming the database and the cause.
"""

from __future__ import annotations

import logging
import os
import shlex
import subprocess
import sys
from pathlib import Path

import psycopg
import pytest
from sqlalchemy import event
from sqlalchemy.exc import OperationalError

from service.cli.exitcodes import ExitCode
from service.db import storage
from service.db.migrate import upgrade
from tests.service.conftest import CORRECT_KL_DIV, ROOT

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


def _serve(env_url: str, read_only: Path | None = None) -> subprocess.CompletedProcess:
    """`serve` run to its end; with `read_only`, that directory bind-mounted read-only in a private mount namespace
    (root writes through permission bits, not through a read-only mount)."""
    serve = [sys.executable, "-m", "service.cli.main", "serve", "--no-worker", "--port", "1"]
    argv = serve if read_only is None else [
        "unshare", "-m", "sh", "-c", f"mount --bind -o ro {read_only} {read_only} && exec {shlex.join(serve)}"]
    return subprocess.run(argv, env={**os.environ, "DATABASE_URL": env_url}, capture_output=True, text=True,
                          cwd=ROOT, timeout=120, check=False)


@pytest.mark.parametrize("existing", [False, True], ids=["new-database", "existing-database"])
def test_serve_on_a_read_only_directory_refuses_to_start_with_one_line(tmp_path, existing):
    data = tmp_path / "data"
    data.mkdir()
    url = f"sqlite:///{data / 'judge.db'}"
    if existing:
        upgrade(url)
    done = _serve(url, read_only=data)
    assert done.returncode == ExitCode.LOCAL_ERROR, done.stderr
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, done.stderr
    assert str(data / "judge.db") in lines[0] and "Read-only file system" in lines[0], lines[0]


def test_serve_on_a_postgresql_that_does_not_answer_refuses_with_one_line_and_no_password():
    done = _serve("postgresql+psycopg://judge:s3cret@127.0.0.1:1/judge")
    assert done.returncode == ExitCode.LOCAL_ERROR, done.stderr
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "PostgreSQL 127.0.0.1:1/judge" in lines[0], done.stderr
    assert "s3cret" not in done.stderr
