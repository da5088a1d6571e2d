"""A full disk and a read-only database are named as such (service/db/storage.py): the refused write answers 507
(disk full) or 503 (read-only) saying which, without a Retry-After; one log line says it when it starts; /readyz
fails while it lasts; reads keep working; the first write that commits afterwards makes the service ready again.

The faults are the databases' own, on the app's real engine: SQLite's `max_page_count` at the file's current size
(the engine then fails with SQLITE_FULL, "database or disk is full", as on a full disk) and `query_only`
(SQLITE_READONLY, as for a read-only file); PostgreSQL's `default_transaction_read_only` (25006, as on a standby).
PostgreSQL's disk_full (53100) is caused for real: a database whose tablespace is a small tmpfs, filled until the
server refuses a row. `serve` on a read-only directory (a read-only bind mount in a private mount namespace) or
on a PostgreSQL that does not answer refuses to start with one line naming the database and the cause.
"""

from __future__ import annotations

import logging
import os
import shlex
import subprocess
import sys
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
from fastapi.testclient import TestClient
from sqlalchemy import event
from sqlalchemy.exc import OperationalError

from service.cli.exitcodes import ExitCode
from service.core.config import Settings
from service.db import storage
from service.db.migrate import upgrade
from service.main import create_app
from tests.service.conftest import ADMIN_KEY, CORRECT_KL_DIV, ROOT, new_key
from tests.small_disk import free_bytes, small_disk

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


PG_DISK_BYTES = 24 << 20
"""The tablespace's disk: a fresh migrated database takes about 4 MB of it."""


@pytest.fixture
def pg_on_a_small_disk(pg_url: str) -> Iterator[tuple[str, Path]]:
    """A migrated PostgreSQL database whose every file lives on a small real filesystem (a tmpfs as the tablespace
    of the database), and that filesystem; all removed at the end. The server's WAL stays on its own disk, as on a
    host whose data disk fills first."""
    server = pg_url.replace("postgresql+psycopg://", "postgresql://", 1)
    name = f"kj_full_{uuid.uuid4().hex[:8]}"
    where = Path(tempfile.mkdtemp(prefix="kj-pg-disk-"))
    where.chmod(0o755)  # the server (user postgres) must reach the mount point
    with small_disk(where, PG_DISK_BYTES, owner="postgres") as disk:
        with psycopg.connect(server, autocommit=True) as conn:
            conn.execute(f"CREATE TABLESPACE {name} LOCATION '{disk}'")
            conn.execute(f"CREATE DATABASE {name} TABLESPACE {name}")
        url = pg_url.rsplit("/", 1)[0] + f"/{name}"
        try:
            upgrade(url)
            yield url, disk
        finally:
            with psycopg.connect(server, autocommit=True) as conn:
                conn.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
                conn.execute(f"DROP TABLESPACE IF EXISTS {name}")
    where.rmdir()


def _fill_postgresql(url: str) -> int:
    """Rows of incompressible text inserted into a table of the database until its disk refused one (53100)."""
    rows = 0
    with psycopg.connect(url.replace("postgresql+psycopg://", "postgresql://", 1), autocommit=True) as conn:
        conn.execute("CREATE TABLE filler (b text)")
        conn.execute("ALTER TABLE filler ALTER COLUMN b SET STORAGE EXTERNAL")  # stored as is, never compressed
        with pytest.raises(psycopg.errors.DiskFull):
            while True:
                conn.execute("INSERT INTO filler SELECT string_agg(md5(random()::text), '') "
                             "FROM generate_series(1, 2000)")
                rows += 1
    return rows


def _incompressible(n_bytes: int) -> str:
    return "".join(f"# {os.urandom(32).hex()}\n" for _ in range(n_bytes // 67))


@pytest.mark.parametrize("db_url", ["postgresql"], indirect=True)
def test_a_postgresql_disk_that_is_really_full_answers_507_and_loses_nothing(db_url, pg_on_a_small_disk, caplog):
    url, disk = pg_on_a_small_disk
    settings = Settings(database_url=url, admin_key=ADMIN_KEY, rate_limit_per_minute=6000, rate_limit_burst=1000)
    with TestClient(create_app(settings)) as client:
        auth = {"Authorization": f"Bearer {new_key(client.app.state.db, 'full')}"}
        # Stored before the disk fills: each with a source that needs pages of its own.
        sources = [CORRECT_KL_DIV.read_text() + _incompressible(60_000) for _ in range(3)]
        stored = [client.post("/v1/submissions", json={"task": "kl_div", "source": s}, headers=auth) for s in sources]
        assert [a.status_code for a in stored] == [202] * 3, [a.text for a in stored]
        assert _fill_postgresql(url) > 0 and free_bytes(disk) < 64 << 10
        with caplog.at_level(logging.ERROR, logger="service.db.session"):
            refused = client.post("/v1/submissions", json={"task": "kl_div", "source": sources[0] + "# 4\n"},
                                  headers=auth)
        assert refused.status_code == 507, refused.text
        assert refused.json()["storage_fault"] == "disk full" and "disk is full" in refused.json()["detail"]
        assert any("refused a write" in r.getMessage() and "disk full" in r.getMessage() for r in caplog.records)
        ready = client.get("/readyz")
        assert ready.status_code == 503 and ready.json()["status"] == "disk full", ready.text
        for answer, source in zip(stored, sources):  # nothing already stored is lost, and it still reads
            got = client.get(f"/v1/submissions/{answer.json()['id']}/source", headers=auth)
            assert got.status_code == 200 and got.json()["source"] == source

        with psycopg.connect(url.replace("postgresql+psycopg://", "postgresql://", 1), autocommit=True) as conn:
            conn.execute("DROP TABLE filler")  # the operator frees space
        again = client.post("/v1/submissions", json={"task": "kl_div", "source": sources[0] + "# 5\n"}, headers=auth)
        assert again.status_code == 202, again.text
        assert client.get("/readyz").status_code == 200
        listed = client.get("/v1/submissions", headers=auth).json()
    ids = {a.json()["id"] for a in stored} | {again.json()["id"]}
    assert ids <= {s["id"] for s in listed["items"]}, listed
