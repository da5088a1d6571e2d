"""Load check: N concurrent clients submit M candidates; report POST latency and time until all are done.

    .venv/bin/python scripts/bench/load_check.py                     # 50 clients, 1000 submissions, SQLite
    .venv/bin/python scripts/bench/load_check.py --database-url postgresql+psycopg://postgres@127.0.0.1:5432/test

It starts its own API (uvicorn) and worker processes on a fresh database (or uses --url and --key for a
running service), submits `tests/corpus/cpu/kl_div_cpp_correct.py` (a trivial correct C++ candidate),
measures each POST, then waits until every submission is `done` and checks each one's verdict.

Judging: by default the workers run in `compile-only` mode (the real sandbox.prepare: extraction, static
checks and the build, cached after the first; the candidate is NOT run), because judging 1000 candidates
for real takes ~5 s each on this 2-core CPU machine. `--judge-mode sandbox` judges them for real.
The report (markdown) is printed at the end.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

from service.client import JudgeClient, JudgeError

ROOT = Path(__file__).resolve().parents[2]
CANDIDATE = ROOT / "tests" / "corpus" / "cpu" / "kl_div_cpp_correct.py"


def percentile(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(p / 100 * (len(ordered) - 1))))]


async def submit_all(base: str, key: str, source: str, clients: int, total: int) -> tuple[list[float], list[str], int]:
    latencies: list[float] = []
    ids: list[str] = []
    retries = 0
    counter = iter(range(total))

    async def client_loop(client: httpx.AsyncClient) -> None:
        nonlocal retries
        for i in counter:
            body = {"task": "kl_div", "source": source, "model": "load-check", "sample_index": i,
                    "idempotency_key": f"load-{i}"}
            while True:
                start = time.perf_counter()
                response = await client.post("/v1/submissions", json=body)
                latencies.append(time.perf_counter() - start)
                if response.status_code == 202:
                    ids.append(response.json()["id"])
                    break
                if response.status_code != 429:
                    raise RuntimeError(f"POST answered {response.status_code}: {response.text}")
                retries += 1
                await asyncio.sleep(float(response.headers.get("retry-after", "1")))

    limits = httpx.Limits(max_connections=clients, max_keepalive_connections=clients)
    async with httpx.AsyncClient(base_url=base, headers={"Authorization": f"Bearer {key}"}, timeout=60,
                                 limits=limits) as client:
        await asyncio.gather(*(client_loop(client) for _ in range(clients)))
    return latencies, ids, retries


def wait_done(base: str, ids: list[str], timeout: float) -> tuple[float, dict[str, int]]:
    start = time.monotonic()
    with httpx.Client(base_url=base, timeout=60) as client:
        while True:
            detail = client.get("/readyz").json()["detail"]
            if detail["queued"] == 0 and detail["held"] == 0:
                break
            if time.monotonic() - start > timeout:
                raise SystemExit(f"not done after {timeout:.0f} s: {detail}")
            time.sleep(0.5)
        statuses: dict[str, int] = {}
        for sub_id in ids:
            view = client.get(f"/v1/submissions/{sub_id}").json()
            key = view["verdict"]["status"] if view["status"] == "done" else f"not done: {view['status']}"
            statuses[key] = statuses.get(key, 0) + 1
    return time.monotonic() - start, statuses


def start_service(args: argparse.Namespace, workdir: Path) -> tuple[str, str, list[subprocess.Popen]]:
    from service import crud
    from service.db.migrate import upgrade
    from service.db.session import Database

    url = args.database_url or f"sqlite:///{workdir / 'load.db'}"
    upgrade(url)
    if not url.startswith("sqlite"):
        from service.db.models import Base

        with Database(url).transaction() as session:  # an empty database for a fair count
            for table in reversed(Base.metadata.sorted_tables):
                session.execute(table.delete())
    with Database(url).transaction() as session:
        key = crud.create_key(session, "load-check")[1]
    env = {**os.environ, "DATABASE_URL": url, "JUDGE_DEVICES": "cpu", "JUDGE_MODE": args.judge_mode,
           "JUDGE_RATE_LIMIT_BURST": "100000", "JUDGE_RATE_LIMIT_PER_MINUTE": "1000000",
           "JUDGE_QUEUE_QUOTA": "100000", "JUDGE_LOG_LEVEL": "WARNING", "JUDGE_POLL_S": "0.1",
           "JUDGE_COMPILE_WORKERS": str(args.compile_workers)}
    port = args.port
    procs = [subprocess.Popen([sys.executable, "-m", "uvicorn", "service.main:create_app", "--factory",
                               "--host", "127.0.0.1", "--port", str(port), "--log-level", "warning"],
                              env=env, cwd=ROOT)]
    procs += [subprocess.Popen([sys.executable, "-m", "service.cli.main", "worker", "--no-migrate"], env=env,
                               cwd=ROOT) for _ in range(args.workers)]
    base = f"http://127.0.0.1:{port}"
    with JudgeClient(base, key="") as judge:
        try:
            judge.wait_ready(60, alive=lambda: all(p.poll() is None for p in procs))
        except JudgeError as exc:
            raise SystemExit(f"the API did not start ({exc})") from None
    return base, key, procs


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--clients", type=int, default=50)
    parser.add_argument("--submissions", type=int, default=1000)
    parser.add_argument("--url", help="use a running service instead of starting one (needs --key)")
    parser.add_argument("--key")
    parser.add_argument("--database-url", help="database for the service this script starts (default: SQLite)")
    parser.add_argument("--judge-mode", default="compile-only", choices=["compile-only", "sandbox"])
    parser.add_argument("--workers", type=int, default=1, help="worker processes to start")
    parser.add_argument("--compile-workers", type=int, default=2)
    parser.add_argument("--port", type=int, default=8765)
    parser.add_argument("--timeout", type=float, default=3600)
    args = parser.parse_args()

    source = CANDIDATE.read_text()
    procs: list[subprocess.Popen] = []
    with tempfile.TemporaryDirectory() as tmp:
        try:
            if args.url:
                base, key = args.url, args.key
            else:
                base, key, procs = start_service(args, Path(tmp))
            started = time.monotonic()
            latencies, ids, retries = asyncio.run(submit_all(base, key, source, args.clients, args.submissions))
            submit_s = time.monotonic() - started
            done_after, statuses = wait_done(base, ids, args.timeout)
            total_s = time.monotonic() - started
        finally:
            for proc in procs:
                proc.terminate()
            for proc in procs:
                proc.wait(120)

    ms = [1e3 * x for x in latencies]
    if (args.database_url or "").startswith("postgresql"):
        db = "PostgreSQL"
    else:
        db = "SQLite (WAL)" if not args.url else "?"
    mode_note = " (real sandbox.prepare, candidates not executed)" if args.judge_mode == "compile-only" else ""
    print(f"""
### Load check ({time.strftime('%Y-%m-%d')})

`scripts/bench/load_check.py --clients {args.clients} --submissions {args.submissions}` on {os.cpu_count()} cores
({platform.processor() or platform.machine()}), {db}, one uvicorn process, {args.workers} worker process(es),
judge mode `{args.judge_mode}`{mode_note}.

| measure | value |
|---|---|
| submissions accepted (202) | {len(ids)} of {args.submissions} ({retries} retried after 429) |
| POST latency p50 / p99 / max | {statistics.median(ms):.1f} / {percentile(ms, 99):.1f} / {max(ms):.1f} ms |
| submit phase | {submit_s:.1f} s ({len(ids) / submit_s:.0f} submissions/s) |
| all done after | {total_s:.1f} s ({done_after:.1f} s after the last POST) |
| verdicts | {', '.join(f'{k}: {v}' for k, v in sorted(statuses.items()))} |
""")
    return 0 if statuses.get("correct", 0) == args.submissions == len(ids) else 1


if __name__ == "__main__":
    sys.exit(main())
