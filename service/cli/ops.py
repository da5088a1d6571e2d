"""Running the service: `serve` (API + a local worker), `worker`, `migrate`, `keys` (straight in the DB).

Heavy imports (uvicorn, SQLAlchemy, the worker, torch through the sandbox) happen inside the commands, so
the client commands of the same CLI start fast.
"""

import json
import logging
import os
import signal
import subprocess
import sys
from typing import TYPE_CHECKING, Annotated

import typer

from service.cli.exitcodes import ExitCode
from service.core.config import JudgeMode, Settings

if TYPE_CHECKING:
    from service.db.session import Database

Devices = Annotated[str | None, typer.Option(help="e.g. cuda:0,cuda:1 or cpu (default: JUDGE_DEVICES, auto).")]
CompileWorkers = Annotated[int | None, typer.Option(help="Parallel compilations (JUDGE_COMPILE_WORKERS).")]
LeaseS = Annotated[float | None, typer.Option(help="Job lease in seconds (JUDGE_LEASE_S).")]
PollS = Annotated[float | None, typer.Option(help="Idle poll interval in seconds (JUDGE_POLL_S).")]
Mode = Annotated[JudgeMode | None, typer.Option(
    help="sandbox (default) or compile-only (load tests: candidates are not run).")]
RoleOption = Annotated[str | None, typer.Option(
    "--role", help="all (build and run, the default), build (only build and publish artifacts: a CPU node) or run "
    "(run what builders built; build itself while no builder is alive). JUDGE_ROLE.")]


def _settings(**overrides: object) -> Settings:
    return Settings(**{name: value for name, value in overrides.items() if value is not None})


def _prepare_db(settings: Settings) -> None:
    """Migrate, or refuse to start with one line naming the database and why it cannot be used (a read-only
    directory, a full disk, a server that does not answer), not a traceback."""
    from pathlib import Path

    from sqlalchemy.engine import make_url
    from sqlalchemy.exc import DBAPIError

    from service.db import storage
    from service.db.migrate import upgrade

    where = storage.where(settings.db_url)
    try:
        if settings.db_url.startswith("sqlite"):
            settings.data_dir.mkdir(parents=True, exist_ok=True)
            database = make_url(settings.db_url).database
            why = storage.sqlite_unwritable(Path(database)) if database and database != ":memory:" else None
            if why is not None:
                typer.echo(f"error: cannot use the database ({where}): {why}", err=True)
                raise typer.Exit(ExitCode.LOCAL_ERROR)
        upgrade(settings.db_url)
    except (OSError, DBAPIError) as exc:
        typer.echo(f"error: {storage.start_failure(where, exc)}", err=True)
        raise typer.Exit(ExitCode.LOCAL_ERROR) from None


def _shown(settings: Settings) -> str:
    """The database URL as it may be printed: the URL may carry a password (DATABASE_URL on a shared host)."""
    from sqlalchemy.engine import make_url

    return make_url(settings.db_url).render_as_string(hide_password=True)


def _logging() -> None:
    from service.observability.logs import configure_logging

    configure_logging()  # JUDGE_LOG_LEVEL; JUDGE_LOG_FORMAT=json|text (json: one object a line, with job ids)


def _require_isolation(settings: Settings) -> None:
    """Refuse to start a judging process without the sandbox it needs: bubblewrap, unless JUDGE_ISOLATION
    names a weaker mechanism (development). Compile-only mode too: building imports candidate code.
    Starting anyway would accept work and fail every job with a system_error nobody reads."""
    from sandbox.isolation import IsolationError, require_isolation
    from service.worker.judging import judge_config

    try:
        mechanism = require_isolation(judge_config(settings).isolation)
    except IsolationError as exc:
        # Printed, not also logged: the log goes to the same stderr, and the explanation is long.
        typer.echo(f"error: cannot judge candidates: {exc}", err=True)
        raise typer.Exit(ExitCode.LOCAL_ERROR) from None
    if mechanism != "bwrap":
        logging.getLogger("kernel-judge").warning(
            "JUDGE_ISOLATION=%s: candidates run with weaker isolation than bubblewrap (development only); "
            "their verdicts record it and are not ranked", mechanism)


def serve(host: Annotated[str, typer.Option(help="Interface to listen on.")] = "127.0.0.1",
          port: Annotated[int, typer.Option(help="TCP port.")] = 8000,
          no_worker: Annotated[bool, typer.Option("--no-worker", help="API only (workers run elsewhere).")] = False,
          ) -> None:
    """Run the API and one local worker (SQLite under JUDGE_DATA_DIR, default ~/.local/share/kernel-judge, unless
    DATABASE_URL is set)."""
    import uvicorn

    settings = _settings()
    if not no_worker:
        _require_isolation(settings)  # before anything listens: the user sees why in this terminal
    _prepare_db(settings)
    # Said at start so that a user minting keys with `keys create` can see it writes the same database.
    typer.echo(f"database: {_shown(settings)}", err=True)
    worker = None
    if not no_worker:
        # JUDGE_PARENT_PID: the worker exits when this process dies, even by SIGKILL, so no orphan is left.
        env = {**os.environ, "DATABASE_URL": settings.db_url, "JUDGE_PARENT_PID": str(os.getpid())}
        worker = subprocess.Popen([sys.executable, "-m", "service.cli.main", "worker", "--no-migrate"], env=env)
        os.environ["JUDGE_LOCAL_WORKER_PID"] = str(worker.pid)  # the API's readiness waits for it (Settings)
    # uvicorn captures SIGTERM during run() and raises it again once it has shut down; with the default
    # handler that would end this process before `finally`, leaving the worker orphaned.
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))
    try:
        uvicorn.run("service.main:create_app", factory=True, host=host, port=port,
                    log_level=os.environ.get("JUDGE_LOG_LEVEL", "info").lower())
    finally:
        if worker is not None:
            worker.terminate()  # SIGTERM: the worker finishes running jobs and releases the rest
            try:
                worker.wait(settings.shutdown_grace_s + 10)
            except subprocess.TimeoutExpired:
                worker.kill()


def worker(devices: Devices = None, compile_workers: CompileWorkers = None, lease_s: LeaseS = None,
           poll_s: PollS = None, mode: Mode = None, role: RoleOption = None,
           max_jobs: Annotated[int | None, typer.Option(help="Exit after this many verdicts.")] = None,
           no_migrate: Annotated[bool, typer.Option("--no-migrate", help="Do not run migrations at start.")] = False,
           ) -> None:
    """Claim and judge jobs from DATABASE_URL (any machine, any GPUs)."""
    from service.db.session import Database
    from service.worker.judging import make_judge
    from service.worker.roles import Role
    from service.worker.runner import Worker

    _logging()
    if role is not None and role not in {r.value for r in Role}:
        typer.echo(f"error: --role must be one of all, build, run (not {role!r})", err=True)
        raise typer.Exit(ExitCode.USAGE)
    settings = _settings(devices=devices, compile_workers=compile_workers, lease_s=lease_s, poll_s=poll_s, mode=mode,
                         role=role)
    _require_isolation(settings)
    if not no_migrate:
        _prepare_db(settings)
    if settings.mode is not JudgeMode.SANDBOX:
        logging.getLogger("service.worker").warning(
            "JUDGE MODE %s: candidates are NOT run; for load-testing the service only", settings.mode.value)
    runner = Worker(Database(settings.db_url), settings, make_judge(settings), settings.device_list(),
                    role=Role(settings.role))
    runner.install_signal_handlers()
    runner.run(max_jobs=max_jobs)


def migrate() -> None:
    """Bring the database schema to the latest version."""
    settings = Settings()
    _prepare_db(settings)
    typer.echo(f"database at the latest schema: {_shown(settings)}")


def maintain(max_bytes: Annotated[int | None, typer.Option(
                 "--max-bytes", help="Evict least recently used builds until the cache fits (default "
                 "JUDGE_BUILD_CACHE_MAX_BYTES; unset: no eviction).")] = None,
             older_than_days: Annotated[float | None, typer.Option(
                 "--older-than-days", help="Prune run directories and claim records older than this (default "
                 "JUDGE_ARTIFACT_RETENTION_DAYS). Verdicts are never deleted.")] = None,
             dry_run: Annotated[bool, typer.Option("--dry-run", help="Report what would go; delete nothing.")] = False,
             ) -> None:
    """Evict old builds by size and prune old artifacts (what a worker's maintenance thread does), once."""
    import json

    from service.maintenance import run_maintenance

    settings = Settings()
    _prepare_db(settings)
    report = run_maintenance(settings, max_bytes=max_bytes, older_than_days=older_than_days, dry_run=dry_run)
    typer.echo(json.dumps(report, indent=2, default=str))


keys = typer.Typer(help="Manage API keys directly in the database `serve` uses (DATABASE_URL, else the SQLite file "
                        "under JUDGE_DATA_DIR, default ~/.local/share/kernel-judge), from any directory.",
                   no_args_is_help=True)


def _db(settings: Settings) -> "Database":
    from service.db.session import Database

    _prepare_db(settings)
    return Database(settings.db_url)


@keys.command("create")
def keys_create(submitter: Annotated[str, typer.Argument(help="Name shown on leaderboards.")],
                as_json: Annotated[bool, typer.Option("--json", help="Print id, submitter and key as JSON.")] = False,
                ) -> None:
    """Mint a key for a submitter; the key is printed once and never stored."""
    from service import crud

    settings = Settings()
    with _db(settings).transaction() as session:
        row, key = crud.create_key(session, submitter)
        ident, name = row.id, row.submitter
    # stdout carries the key alone (`export JUDGE_API_KEY=$(kernel-judge keys create alice)`); where it went, stderr.
    typer.echo(f"key for {name} written to {_shown(settings)}", err=True)
    typer.echo(json.dumps({"id": ident, "submitter": name, "key": key}) if as_json else key)


@keys.command("list")
def keys_list() -> None:
    """List keys (prefix, submitter, state)."""
    from service import crud

    with _db(Settings()).transaction(read_only=True) as session:
        rows = [(r.id, r.prefix, r.submitter, r.revoked_at) for r in crud.list_keys(session)]
    for ident, prefix, submitter, revoked_at in rows:
        state = f"revoked {revoked_at:%Y-%m-%d}" if revoked_at else "active"
        typer.echo(f"{ident}  {prefix}...  {submitter}  {state}")


@keys.command("revoke")
def keys_revoke(key_id: Annotated[str, typer.Argument(metavar="ID", help="The key's id (from `keys list`).")]) -> None:
    """Revoke a key by id."""
    from service import crud

    with _db(Settings()).transaction() as session:
        row = crud.revoke_key(session, key_id)
        found = None if row is None else (row.id, row.submitter)
    if found is None:
        typer.echo(f"no key {key_id}", err=True)
        raise typer.Exit(5)
    typer.echo(f"revoked {found[0]} ({found[1]})")
