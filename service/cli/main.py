"""`kernel-judge`: run the service (serve, worker, migrate, keys) and talk to it (submit, status).

    kernel-judge serve                 API + one local worker, SQLite under ./data (one machine)
    kernel-judge worker                a standalone worker for DATABASE_URL (any machine, any GPUs)
    kernel-judge migrate               bring the database schema to the latest version
    kernel-judge keys create NAME      mint an API key (printed once); also `keys list`, `keys revoke ID`
    kernel-judge submit --task kl_div kernel.py [--wait]
    kernel-judge status ID
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from service.core.config import JudgeMode, Settings

DEFAULT_URL = "http://127.0.0.1:8000"


def _settings(args: argparse.Namespace) -> Settings:
    overrides = {}
    for name in ("devices", "compile_workers", "lease_s", "mode", "poll_s"):
        value = getattr(args, name, None)
        if value is not None:
            overrides[name] = value
    return Settings(**overrides)


def _prepare_db(settings: Settings) -> None:
    from service.db.migrate import upgrade

    if settings.db_url.startswith("sqlite"):
        settings.data_dir.mkdir(parents=True, exist_ok=True)
    upgrade(settings.db_url)


def _logging() -> None:
    logging.basicConfig(level=os.environ.get("JUDGE_LOG_LEVEL", "INFO"),
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")


# --- service commands ------------------------------------------------------------------------------

def cmd_serve(args: argparse.Namespace) -> int:
    import uvicorn

    settings = _settings(args)
    _prepare_db(settings)
    worker = None
    if not args.no_worker:
        env = {**os.environ, "DATABASE_URL": settings.db_url}
        worker = subprocess.Popen([sys.executable, "-m", "service.cli.main", "worker", "--no-migrate"], env=env)
    # uvicorn captures SIGTERM during run() and raises it again once it has shut down; with the default
    # handler that would end this process before `finally`, leaving the worker orphaned.
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))
    try:
        uvicorn.run("service.main:create_app", factory=True, host=args.host, port=args.port,
                    log_level=os.environ.get("JUDGE_LOG_LEVEL", "info").lower())
    finally:
        if worker is not None:
            worker.terminate()  # SIGTERM: the worker finishes running jobs and releases the rest
            try:
                worker.wait(settings.shutdown_grace_s + 10)
            except subprocess.TimeoutExpired:
                worker.kill()
    return 0


def cmd_worker(args: argparse.Namespace) -> int:
    from service.db.session import Database
    from service.worker.judging import make_judge
    from service.worker.runner import Worker

    _logging()
    settings = _settings(args)
    if not args.no_migrate:
        _prepare_db(settings)
    if settings.mode is not JudgeMode.SANDBOX:
        logging.warning("JUDGE MODE %s: candidates are NOT run; for load-testing the service only",
                        settings.mode.value)
    worker = Worker(Database(settings.db_url), settings, make_judge(settings), settings.device_list())
    worker.install_signal_handlers()
    worker.run(max_jobs=args.max_jobs)
    return 0


def cmd_migrate(args: argparse.Namespace) -> int:
    settings = Settings()
    _prepare_db(settings)
    print(f"database at the latest schema: {settings.db_url}")
    return 0


def cmd_keys(args: argparse.Namespace) -> int:
    from service import crud
    from service.db.session import Database

    settings = Settings()
    _prepare_db(settings)
    db = Database(settings.db_url)
    if args.keys_command == "create":
        row, key = crud.create_key(db, args.submitter)
        print(json.dumps({"id": row.id, "submitter": row.submitter, "key": key}) if args.json else key)
    elif args.keys_command == "list":
        for row in crud.list_keys(db):
            state = f"revoked {row.revoked_at:%Y-%m-%d}" if row.revoked_at else "active"
            print(f"{row.id}  {row.prefix}...  {row.submitter}  {state}")
    else:
        row = crud.revoke_key(db, args.id)
        if row is None:
            print(f"no key {args.id}", file=sys.stderr)
            return 1
        print(f"revoked {row.id} ({row.submitter})")
    return 0


# --- client commands -------------------------------------------------------------------------------

def _client(args: argparse.Namespace):  # noqa: ANN202
    import httpx

    headers = {"Authorization": f"Bearer {args.key}"} if args.key else {}
    return httpx.Client(base_url=args.url, headers=headers, timeout=30)


def _wait(client, submission_id: str) -> dict:  # noqa: ANN001
    """Follow the submission's server-sent events until it is done."""
    last = None
    with client.stream("GET", f"/v1/submissions/{submission_id}/events", timeout=None) as stream:
        for line in stream.iter_lines():
            if not line.startswith("data: "):
                continue
            view = json.loads(line[6:])
            if view["stage"] != last:
                last = view["stage"]
                where = f" (position {view['position']})" if view.get("position") is not None else ""
                print(f"{time.strftime('%H:%M:%S')} {view['stage']}{where}", file=sys.stderr)
            if view["status"] == "done":
                return view
    return client.get(f"/v1/submissions/{submission_id}").json()


def cmd_submit(args: argparse.Namespace) -> int:
    source = sys.stdin.read() if str(args.file) == "-" else Path(args.file).read_text(encoding="utf-8")
    body = {"task": args.task, "source": source, "model": args.model, "tags": args.tag or []}
    if args.idempotency_key:
        body["idempotency_key"] = args.idempotency_key
    with _client(args) as client:
        response = client.post("/v1/submissions", json=body)
        if response.status_code != 202:
            print(f"{response.status_code}: {response.text}", file=sys.stderr)
            return 1
        accepted = response.json()
        print(accepted["id"])
        if not args.wait:
            return 0
        view = _wait(client, accepted["id"])
    verdict = view.get("verdict") or {}
    print(f"{verdict.get('status')}: {verdict.get('diagnosis')}")
    return 0 if verdict.get("status") == "correct" else 2


def cmd_status(args: argparse.Namespace) -> int:
    with _client(args) as client:
        response = client.get(f"/v1/submissions/{args.id}")
    print(json.dumps(response.json(), indent=2))
    return 0 if response.status_code == 200 else 1


# --- arguments -------------------------------------------------------------------------------------

def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="kernel-judge", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)

    def worker_options(p: argparse.ArgumentParser) -> None:
        p.add_argument("--devices", help="e.g. cuda:0,cuda:1 or cpu (default: JUDGE_DEVICES, auto)")
        p.add_argument("--compile-workers", type=int, help="parallel compilations (JUDGE_COMPILE_WORKERS)")
        p.add_argument("--lease-s", type=float, help="job lease in seconds (JUDGE_LEASE_S)")
        p.add_argument("--poll-s", type=float, help="idle poll interval (JUDGE_POLL_S)")
        p.add_argument("--mode", choices=[m.value for m in JudgeMode],
                       help="sandbox (default) or compile-only (load tests: candidates are not run)")

    serve = sub.add_parser("serve", help="run the API and one local worker")
    serve.add_argument("--host", default="127.0.0.1")
    serve.add_argument("--port", type=int, default=8000)
    serve.add_argument("--no-worker", action="store_true", help="API only (workers run elsewhere)")
    serve.set_defaults(func=cmd_serve)

    worker = sub.add_parser("worker", help="claim and judge jobs from DATABASE_URL")
    worker_options(worker)
    worker.add_argument("--max-jobs", type=int, help="exit after this many verdicts")
    worker.add_argument("--no-migrate", action="store_true", help="do not run migrations at start")
    worker.set_defaults(func=cmd_worker)

    sub.add_parser("migrate", help="upgrade the database schema").set_defaults(func=cmd_migrate)

    keys = sub.add_parser("keys", help="manage API keys directly in the database")
    keys_sub = keys.add_subparsers(dest="keys_command", required=True)
    create = keys_sub.add_parser("create", help="mint a key for a submitter; prints the key once")
    create.add_argument("submitter")
    create.add_argument("--json", action="store_true")
    keys_sub.add_parser("list", help="list keys")
    revoke = keys_sub.add_parser("revoke", help="revoke a key by id")
    revoke.add_argument("id")
    keys.set_defaults(func=cmd_keys)

    def client_options(p: argparse.ArgumentParser) -> None:
        p.add_argument("--url", default=os.environ.get("JUDGE_URL", DEFAULT_URL), help="API base URL (JUDGE_URL)")
        p.add_argument("--key", default=os.environ.get("JUDGE_API_KEY"), help="API key (JUDGE_API_KEY)")

    submit = sub.add_parser("submit", help="submit a candidate file (or - for stdin)")
    submit.add_argument("file")
    submit.add_argument("--task", required=True)
    submit.add_argument("--model")
    submit.add_argument("--tag", action="append")
    submit.add_argument("--idempotency-key")
    submit.add_argument("--wait", action="store_true", help="follow it until done and print the verdict")
    client_options(submit)
    submit.set_defaults(func=cmd_submit)

    status = sub.add_parser("status", help="show a submission")
    status.add_argument("id")
    client_options(status)
    status.set_defaults(func=cmd_status)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
