"""Time the leaderboard page and JSON route over 10,000 judged submissions, on PostgreSQL and SQLite.

    python scripts/bench/bench_pages.py                      # both back ends; PostgreSQL from JUDGE_TEST_PG_URL or
                                                       # postgresql+psycopg://postgres@127.0.0.1:5432/test
    python scripts/bench/bench_pages.py --n 10000 --requests 60

Seeds N submissions (a realistic mix: 60% correct, one in three codes resent under another model name, 5%
judged under unshare, 10% failing an extra shape, two GPU models, verdict JSON the size of a real H100
verdict) into a fresh database per back end, then times requests through the app in this process
(server time: an ASGI wrapper times each call of the app, from the request to the last byte of the
answer: routing, queries, ranking, template; not the client or a network) and
prints p50/p95 in three states (MODES: the steady state between verdicts, right after a new verdict, and
the first request of a new API process), then EXPLAIN ANALYZE of the queries behind them on PostgreSQL.
"""

from __future__ import annotations

import argparse
import copy
import datetime as dt
import hashlib
import json
import os
import random
import statistics
import tempfile
import time
import uuid
from pathlib import Path

from sqlalchemy import insert, text

from service import ranking
from service.db.migrate import upgrade
from service.db.models import ApiKey, Job, Submission, VerdictRow, ranking_columns
from service.db.session import Database

ROOT = Path(__file__).resolve().parents[2]

PG_SERVER = os.environ.get("JUDGE_TEST_PG_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/test")
TEMPLATE = json.loads((ROOT / "docs/results/verdicts-h100-hostile-2026-11-22.json").read_text())[
    "tests/corpus/cuda/kl_div_fast.py"]
GPUS = ("NVIDIA H100 80GB HBM3", "NVIDIA A100-SXM4-80GB")


def fake_verdict(rng: random.Random, code: str, gpu: str) -> tuple[str, dict]:
    v = copy.deepcopy(TEMPLATE)
    v["source_sha256"] = hashlib.sha256(code.encode()).hexdigest()
    v["environment"]["device_name"] = gpu
    r = rng.random()
    if r < 0.60:
        status = "correct"
        median = 0.72 * rng.lognormvariate(0.6, 0.5)
        half = median * rng.uniform(0.001, 0.01)
        c = v["performance"]["candidate"]
        c.update(median_ms=median, q25_ms=median - half, q75_ms=median + half)
        v["performance"]["speedups"] = {k: b["median_ms"] / median for k, b in v["performance"]["baselines"].items()}
        v["performance"]["speed_of_light_fraction"] = 0.716 / median
        if rng.random() < 0.05:
            v["environment"]["isolation"] = "unshare"
        if rng.random() < 0.10:
            v["extra_shapes"][0]["passed"] = False
    else:
        status = rng.choice(["incorrect", "incorrect", "compile_error", "runtime_error", "policy_violation"])
        v["performance"] = None
    v["status"] = status
    return status, v


SUBMITTERS = [f"user{i:02d}" for i in range(50)]
MODELS = [f"model-{i:02d}" for i in range(20)]
T0 = dt.datetime(2026, 11, 1)


def api_keys() -> list[dict]:
    return [{"id": hashlib.sha256(f"key {s}".encode()).hexdigest()[:32], "submitter": s, "prefix": "kj_bench",
             "key_hash": hashlib.sha256(s.encode()).hexdigest(), "created_at": T0} for s in SUBMITTERS]


def judged(i: int, code: str, rng: random.Random, status: str | None = None) -> tuple[dict, dict, dict]:
    """Rows (submission, job, verdict) of submission number i; a random verdict, or one of `status`."""
    key = rng.choice(api_keys())
    sid = uuid.uuid4().hex
    when = T0 + dt.timedelta(seconds=i * 150)
    gpu = GPUS[0] if rng.random() < 0.8 else GPUS[1]
    while True:
        verdict_status, v = fake_verdict(rng, code, gpu)
        if status is None or verdict_status == status:
            break
    perf = v["performance"] or {}
    sub = {"id": sid, "task_id": "kl_div", "source": code, "text_sha256": hashlib.sha256(code.encode()).hexdigest(),
           "api_key_id": key["id"], "submitter": key["submitter"], "model": rng.choice(MODELS), "sampling": {},
           "tags": [], "created_at": when}
    job = {"submission_id": sid, "task_id": "kl_div", "state": "done", "queued_at": when, "not_before": when,
           "finished_at": when, "claims": 1}
    verdict = {"submission_id": sid, "task_id": "kl_div", "status": verdict_status, "diagnosis": v["diagnosis"],
               "device": "cuda:0", "device_name": gpu, "median_ms": (perf.get("candidate") or {}).get("median_ms"),
               "speedup_eager": (perf.get("speedups") or {}).get("eager"),
               "speedup_compile": (perf.get("speedups") or {}).get("compile"),
               "speed_of_light": perf.get("speed_of_light_fraction"), "worker_id": "bench", "verdict": v,
               "created_at": when, **ranking_columns(v)}
    return sub, job, verdict


def seed(db: Database, n: int, rng: random.Random) -> None:
    codes: list[str] = []
    subs, jobs, verdicts = [], [], []
    for i in range(n):
        code = rng.choice(codes) if codes and rng.random() < 1 / 3 else f"# kernel {i}\n" + "x = 1\n" * 40
        codes.append(code)
        sub, job, verdict = judged(i, code, rng)
        subs.append(sub)
        jobs.append(job)
        verdicts.append(verdict)
    with db.transaction() as session:
        session.execute(insert(ApiKey), api_keys())
        for table, rows in ((Submission, subs), (Job, jobs), (VerdictRow, verdicts)):
            for start in range(0, len(rows), 1000):
                session.execute(insert(table), rows[start:start + 1000])


def add_correct(db: Database, i: int, rng: random.Random) -> None:
    """One more judged submission, correct and of a new code: what a worker records during a batch run."""
    sub, job, verdict = judged(i, f"# new kernel {i}\n", rng, status="correct")
    with db.transaction() as session:
        for table, row in ((Submission, sub), (Job, job), (VerdictRow, verdict)):
            session.execute(insert(table), [row])


class ServerTimer:
    """ASGI wrapper: how long the app took to answer one request, from the call to the last byte sent
    (routing, queries, ranking, template); the test client's own thread hops are not counted."""

    def __init__(self, app) -> None:  # noqa: ANN001
        self.app, self.last_ms, self.last_cpu_ms = app, 0.0, 0.0

    async def __call__(self, scope, receive, send) -> None:  # noqa: ANN001
        t, cpu = time.perf_counter(), time.process_time()
        await self.app(scope, receive, send)
        if scope["type"] == "http":
            self.last_ms = (time.perf_counter() - t) * 1e3
            # CPU of this whole process (all threads) meanwhile: on a loaded machine wall time mostly measures
            # waiting for a core; this is the work itself (SQLite's included, PostgreSQL's server not).
            self.last_cpu_ms = (time.process_time() - cpu) * 1e3


MODES = {
    "cached": "the steady state between two verdicts (service.ranking.Cache)",
    "new verdict": "a correct verdict of a new code recorded before each request (a batch run: the pool reads "
                   "it, Python re-ranks)",
    "first": "the app's cache and pools emptied before each request (the first request of a new API process: "
             "the task's rankable verdicts read whole)",
}


def time_requests(url: str, paths: list[str], requests: int, mode: str, rng: random.Random,
                  serial: list[int]) -> dict[str, tuple[float, ...]]:
    """p50/p95 server ms and CPU p50 ms per path, in one of MODES."""
    from fastapi.testclient import TestClient

    from service.core.config import Settings
    from service.main import create_app

    app = create_app(Settings(database_url=url))
    timer = ServerTimer(app)
    db = Database(url)
    out = {}
    with TestClient(timer) as client:
        for path in paths:
            for _ in range(5):  # warm-up: connection pool, template compilation
                assert client.get(path).status_code == 200, path
            times, cpus = [], []
            for _ in range(requests):
                if mode == "first":
                    app.state.ranking_cache = ranking.Cache()
                elif mode == "new verdict":
                    serial[0] += 1
                    add_correct(db, serial[0], rng)
                response = client.get(path)
                times.append(timer.last_ms)
                cpus.append(timer.last_cpu_ms)
                assert response.status_code == 200
            times.sort()
            out[path] = (statistics.median(times), times[int(0.95 * (len(times) - 1))], statistics.median(cpus))
    db.dispose()
    return out


def explain(url: str) -> str:
    from sqlalchemy.dialects import postgresql

    from service import rankable

    db = Database(url)
    lines = []
    with db.transaction(read_only=True) as session:
        top = rankable.Pool("kl_div").refresh(session).max_id
        for name, stmt in (("count of the rankable verdicts up to the largest id held (every request)",
                            rankable.count_query("kl_div", top)),
                           ("the rows above the largest id held (after a new verdict)",
                            rankable.fetch_query("kl_div", top - 1)),
                           ("every rankable verdict (the first request of a process)", rankable.fetch_query("kl_div"))):
            sql = str(stmt.compile(dialect=postgresql.dialect(), compile_kwargs={"literal_binds": True}))
            plan = session.execute(text("EXPLAIN (ANALYZE, BUFFERS) " + sql)).scalars().all()
            lines += [f"-- {name}", *plan, ""]
    db.dispose()
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=10_000)
    parser.add_argument("--requests", type=int, default=60)
    parser.add_argument("--backend", choices=("postgresql", "sqlite", "both"), default="both")
    args = parser.parse_args()
    paths = ["/leaderboard/kl_div", "/v1/leaderboard/kl_div", "/leaderboard/kl_div?by=source",
             "/v1/leaderboard/kl_div?by=source&limit=50", f"/leaderboard/kl_div?device={GPUS[0]}&sort=median_ms", "/"]
    backends = ["postgresql", "sqlite"] if args.backend == "both" else [args.backend]
    for backend in backends:
        if backend == "sqlite":
            url = f"sqlite:///{tempfile.mkdtemp()}/bench.db"
        else:
            import psycopg

            name = f"kj_bench_{uuid.uuid4().hex[:8]}"
            with psycopg.connect(PG_SERVER.replace("+psycopg", ""), autocommit=True) as conn:
                conn.execute(f'CREATE DATABASE "{name}"')
            url = PG_SERVER.rsplit("/", 1)[0] + f"/{name}"
        upgrade(url)
        db = Database(url)
        t = time.perf_counter()
        seed(db, args.n, random.Random(0))
        if backend == "postgresql":
            with db.engine.begin() as conn:
                conn.execute(text("ANALYZE"))
        with db.transaction(read_only=True) as session:
            count = session.execute(text("SELECT count(*) FROM verdicts")).scalar()
            board = ranking.leaderboard(session, ranking.Query(task="kl_div", by="source"))
        db.dispose()
        print(f"\n## {backend}: {count} verdicts seeded in {time.perf_counter() - t:.1f} s; "
              f"{sum(d.total for d in board.devices)} distinct ranked codes")
        print(f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores; {args.requests} requests each")
        rng, serial = random.Random(1), [args.n]
        results = {mode: time_requests(url, paths, args.requests if mode == "cached" else max(5, args.requests // 2),
                                       mode, rng, serial) for mode in MODES}
        for mode, what in MODES.items():
            print(f"- {mode}: {what}")
        heads = " | ".join(f"{m} p50 ms | {m} p95 ms | {m} CPU p50 ms" for m in MODES)
        print(f"\n| request | {heads} |\n|---|" + "---|" * (3 * len(MODES)))
        for path in paths:
            cells = " | ".join(f"{p50:.1f} | {p95:.1f} | {cpu:.1f}"
                               for p50, p95, cpu in (results[m][path] for m in MODES))
            print(f"| `{path}` | {cells} |")
        if backend == "postgresql":
            print("\nEXPLAIN ANALYZE of the queries behind the pages (service/rankable.py):\n```")
            print(explain(url))
            print("```")
            import psycopg

            with psycopg.connect(PG_SERVER.replace("+psycopg", ""), autocommit=True) as conn:
                conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


if __name__ == "__main__":
    main()
