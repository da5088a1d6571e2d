"""CPU of one API process holding many idle event streams (issue 41, point 2): before and after the shared watcher.

Starts a real uvicorn API process from the source tree given (`--tree`, e.g. a checkout of main before the
change, or this one) on a fresh SQLite database holding `--streams` queued submissions and no worker, opens one
`GET /v1/submissions/{id}/events` stream per submission, waits until every stream sent its first event, then
reads the server process's CPU time (utime + stime from /proc) over `--seconds`. Prints the share of one core.

    python -m scripts.experiments.idle_streams_cpu --tree /path/to/checkout --streams 200 --seconds 20
"""

from __future__ import annotations

import argparse
import asyncio
import os
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

from service import crud
from service.api.schemas import SubmissionCreate
from service.db.migrate import upgrade
from service.db.session import Database

SOURCE = (Path(__file__).resolve().parents[2] / "tests/corpus/cpu/kl_div_cpp_correct.py")


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def seed(url: str, n: int) -> list[str]:
    upgrade(url)
    database = Database(url)
    source = SOURCE.read_text()
    with database.transaction() as session:
        key = crud.create_key(session, "streams")[0]
        ids = [crud.create_submission(session, key, SubmissionCreate(task="kl_div", source=f"{source}\n# {i}\n",
                                                                      model="m")).submission.id for i in range(n)]
    database.dispose()
    return ids


async def hold_streams(base: str, ids: list[str], pid: int, seconds: float) -> float:
    started = asyncio.Semaphore(0)

    async def follow(client: httpx.AsyncClient, sub_id: str) -> None:
        async with client.stream("GET", f"{base}/v1/submissions/{sub_id}/events") as stream:
            if stream.status_code != 200:
                raise SystemExit(f"stream answered {stream.status_code}: {(await stream.aread())[:300]!r}")
            async for line in stream.aiter_lines():
                if line.startswith("data:"):
                    started.release()

    limits = httpx.Limits(max_connections=len(ids) + 10)
    async with httpx.AsyncClient(timeout=None, limits=limits) as client:
        tasks = [asyncio.create_task(follow(client, sub_id)) for sub_id in ids]
        for _ in ids:
            await asyncio.wait_for(started.acquire(), 120)
        await asyncio.sleep(2)  # let the first looks (queue positions read once) pass
        before, t0 = cpu_seconds(pid), time.monotonic()
        await asyncio.sleep(seconds)
        used, wall = cpu_seconds(pid) - before, time.monotonic() - t0
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
    return used / wall


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tree", type=Path, required=True, help="source tree whose API process is measured")
    parser.add_argument("--streams", type=int, default=200)
    parser.add_argument("--seconds", type=float, default=20.0)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        url = f"sqlite:///{tmp}/streams.db"
        ids = seed(url, args.streams)
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        env = {**os.environ, "DATABASE_URL": url, "PYTHONPATH": str(args.tree.resolve()),
               "JUDGE_SSE_MAX_STREAMS_PER_KEY": str(args.streams + 10), "JUDGE_LOG_LEVEL": "WARNING"}
        server = subprocess.Popen([sys.executable, "-m", "uvicorn", "service.main:create_app", "--factory",
                                   "--port", str(port), "--log-level", "warning"], cwd=args.tree, env=env)
        base = f"http://127.0.0.1:{port}"
        try:
            for _ in range(600):
                try:
                    if httpx.get(f"{base}/healthz", timeout=2).status_code == 200:
                        break
                except httpx.HTTPError:
                    time.sleep(0.1)
            share = asyncio.run(hold_streams(base, ids, server.pid, args.seconds))
        finally:
            server.terminate()
            server.wait(30)
    print(f"{args.streams} idle streams, tree {args.tree}: {share:.1%} of one core over {args.seconds:.0f} s")


if __name__ == "__main__":
    main()
