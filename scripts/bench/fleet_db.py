"""The database at 100 GPUs: 100 simulated workers claiming, heartbeating and recording verdicts through the
project's own queue code (service.queue.claims, service.worker.holds and registry: the statements a real worker
sends, not hand-written SQL) against one PostgreSQL, and one SQLite file for contrast.

    PYTHONPATH=$PWD python scripts/bench/fleet_db.py --out docs/results/fleet-db-cpu-DATE.md

A fleet of 100 GPUs judging ~2-3 s per job claims ~30-50 jobs a second. Each simulated worker runs a real worker's
cycle on a job: `claim` (longest first within the default window, service.queue.order), `advance` to compiled and
to running, the device hold's two stamps (service.worker.holds), then `finish` with a real H100 verdict (~9 KB of
JSON, from docs/results/). A thread per process renews every held lease (`heartbeat`) and writes every worker's
row (`registry.beat`), as the worker's heartbeat thread does, every --heartbeat-s (a real worker: lease_s / 4 =
30 s; the bench's default of 3 s is ten times that load). Two phases per database:

- paced: the claims spread to --rate claims per second over all workers (each worker claims every workers / rate
  seconds and holds its job for half that): does the database keep the target, and at what latency?
- max: every worker claims again as soon as its job is recorded, no hold: the most it sustains, hence the
  headroom over the target.

The simulated workers are threads in --processes processes (the GIL would otherwise be the bottleneck), each
process with a pool of --pool connections shared by its workers (latencies include the wait for one). A real
fleet opens at least one connection per worker process (its LISTEN connection besides), so 100 workers need
max_connections above 100 or a pooler; this bench stays at processes x pool connections to leave the shared
server's connections to its other users. PostgreSQL gets a fresh database of its own (migrated, dropped at the
end); its backends' CPU time over each phase is read from /proc (the server is local), which gives the server's
CPU per job cycle whatever the client's own CPU limits: the capacity a dedicated server core would have.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import platform
import random
import subprocess
import tempfile
import threading
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

from sqlalchemy import create_engine, text
from sqlalchemy.engine import make_url
from sqlalchemy.orm import sessionmaker

from sandbox.verdict import Verdict
from service import crud
from service.batches.schemas import Sample
from service.batches.store import create_batch
from service.db.migrate import upgrade
from service.db.session import Database
from service.queue import claims as q
from service.queue import lengths
from service.queue.states import JobState
from service.worker import holds, registry

ROOT = Path(__file__).resolve().parents[2]
VERDICTS = ROOT / "docs" / "results" / "verdicts-h100-2026-11-26-v3.json"
TASKS = ("kl_div", "cross_entropy", "kl_div_train", "cross_entropy_train")
LEASE_S = 120.0
"""The default lease (Settings.lease_s): what a heartbeat extends."""
WINDOW = 32
"""The default claim window (Settings.claim_window): claims read and lock this many candidate rows."""
OPS = ("claim", "advance", "hold", "finish", "heartbeat", "worker_row")


@dataclass(frozen=True)
class Phase:
    name: str
    seconds: float
    rate: float | None
    """Claims per second over all workers; None: as fast as they go, no hold."""


class PooledDatabase(Database):
    """The project's Database with a fixed pool of `size` connections for all the threads of one process."""

    def __init__(self, url: str, size: int) -> None:
        super().__init__(url)
        if not self.sqlite:
            self.engine.dispose()
            self.engine = create_engine(url, pool_pre_ping=True, pool_size=size, max_overflow=0, pool_timeout=600)
            self._sessions = sessionmaker(self.engine, expire_on_commit=False)
            self._read_sessions = sessionmaker(self.engine.execution_options(read_only=True),
                                               expire_on_commit=False)


class Recorder:
    """(op, start, seconds) of every call that succeeded, and (op, start, error) of every call that raised, from all
    threads of a process. A failed call is what a real worker would retry or log; the simulated worker goes on."""

    def __init__(self) -> None:
        self.rows: list[tuple[str, float, float]] = []
        self.errors: list[tuple[str, float, str]] = []
        self.empty = 0
        self.lock = threading.Lock()

    def timed(self, op: str, fn, *args, **kwargs):  # noqa: ANN001, ANN002, ANN003, ANN201
        start = time.time()
        try:
            out = fn(*args, **kwargs)
        except Exception as exc:  # noqa: BLE001 - counted and shown: the database refused or timed out
            with self.lock:
                self.errors.append((op, start, f"{type(exc).__name__}: {str(exc).splitlines()[0][:120]}"))
            return FAILED
        with self.lock:
            self.rows.append((op, start, time.time() - start))
        return out


FAILED = object()
"""What `Recorder.timed` returns for a call that raised."""


def real_verdict() -> Verdict:
    return Verdict.model_validate(json.loads(VERDICTS.read_text())["tests/corpus/cuda/kl_div_fast.py"])


def simulated_worker(db: Database, worker_id: str, phase: Phase, workers: int, start: float, stop: float,
                     verdict: Verdict, rec: Recorder, holding: dict[str, str], rng: random.Random) -> None:
    period = workers / phase.rate if phase.rate else 0.0
    hold_s = period / 2
    pause = threading.Event()
    next_at = start + rng.uniform(0, period)
    policy = q.RetryPolicy()
    while True:
        if period:
            pause.wait(max(0.0, next_at - time.time()))
            # A worker that fell behind its schedule claims once, not once per missed period: a slow cycle
            # must show as a lower rate, not as a burst that the latencies then blame on the database.
            next_at = max(next_at + period, time.time())
        if time.time() >= stop:
            return
        got = rec.timed("claim", q.claim, db, worker_id, 1, LEASE_S, seconds=lengths.default_seconds, window=WINDOW)
        if got is FAILED:
            continue
        if not got:
            rec.empty += 1
            continue
        c = got[0]
        holding[worker_id] = c.token
        rec.timed("advance", q.advance, db, c.token, JobState.COMPILED)
        rec.timed("advance", q.advance, db, c.token, JobState.RUNNING)
        rec.timed("hold", holds.started, db, c.token, f"sim/{worker_id}")
        if hold_s:
            pause.wait(hold_s)
        rec.timed("hold", holds.ended, db, c.token)
        rec.timed("finish", q.finish, db, c.token, verdict, worker_id, policy)
        holding.pop(worker_id, None)


def heartbeats(db: Database, worker_id: str, every_s: float, start: float, stop: float, rec: Recorder,
               holding: dict[str, str], rng: random.Random) -> None:
    """One worker's heartbeat thread: its lease renewal and its row, every `every_s` (first at a random offset)."""
    pause = threading.Event()
    next_at = start + rng.uniform(0, every_s)
    while True:
        pause.wait(max(0.0, next_at - time.time()))
        next_at = max(next_at + every_s, time.time())
        if time.time() >= stop:
            return
        token = holding.get(worker_id)
        if token:  # with nothing held a worker's heartbeat sends no statement (q.heartbeat returns at once)
            rec.timed("heartbeat", q.heartbeat, db, [token], LEASE_S)
        current = [{"job_id": 0, "phase": "executing"}] if token else []
        rec.timed("worker_row", registry.beat, db, worker_id, current, {"verdicts": 0})


def run_process(url: str, pool: int, worker_ids: list[str], phase: Phase, workers: int, heartbeat_s: float,
                ready: mp.Queue, go: mp.Queue, results: mp.Queue) -> None:
    db = PooledDatabase(url, pool)
    verdict = real_verdict()
    rec = Recorder()
    holding: dict[str, str] = {}
    ready.put(os.getpid())
    start = go.get()  # the common start, once every process has imported and connected
    stop = start + phase.seconds
    rng = random.Random(worker_ids[0])
    threads = [threading.Thread(target=simulated_worker, args=(db, w, phase, workers, start, stop, verdict, rec,
                                                               holding, rng)) for w in worker_ids]
    threads += [threading.Thread(target=heartbeats, args=(db, w, heartbeat_s, start, stop, rec, holding, rng))
                for w in worker_ids]
    pause = threading.Event()
    pause.wait(max(0.0, start - time.time()))
    cpu0 = time.process_time()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    results.put({"rows": rec.rows, "errors": rec.errors, "empty": rec.empty, "cpu_s": time.process_time() - cpu0})
    db.dispose()


def backend_cpu(url: str) -> dict[int, float]:
    """CPU seconds so far of every server backend connected to the bench's database (local server: /proc)."""
    ticks = os.sysconf("SC_CLK_TCK")
    engine = create_engine(url)
    with engine.connect() as conn:
        pids = conn.execute(text("SELECT pid FROM pg_stat_activity WHERE datname = current_database()")).scalars()
        out = {}
        for pid in pids:
            try:
                fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            out[pid] = (int(fields[11]) + int(fields[12])) / ticks
    engine.dispose()
    return out


def fill(db: Database, jobs: int) -> None:
    """Queue `jobs` jobs of the four tasks, mixed, as batches of 2,000 (service.batches.store.create_batch)."""
    with db.transaction() as session:
        key = crud.create_key(session, "bench")[0]
    made = 0
    while made < jobs:
        n = min(2000, jobs - made)
        samples = [(i + 1, Sample(task=TASKS[(made + i) % 4], source=f"# job {made + i}\nclass ModelNew: pass\n"))
                   for i in range(n)]
        with db.transaction() as session:
            create_batch(session, session.merge(key), samples, name=None, tags=[])
        made += n


def percentile(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(p * len(ordered)))] if ordered else float("nan")


def run_phase(url: str, args: argparse.Namespace, phase: Phase) -> dict:
    ctx = mp.get_context("spawn")
    results: mp.Queue = ctx.Queue()
    ids = [f"sim-{i:03d}" for i in range(args.workers)]
    groups = [ids[i::args.processes] for i in range(args.processes)]
    db = Database(url)
    for worker_id in ids:
        registry.register(db, worker_id, ["cuda:0"], "sandbox")
    db.dispose()
    ready: mp.Queue = ctx.Queue()
    go: mp.Queue = ctx.Queue()
    procs = [ctx.Process(target=run_process, args=(url, args.pool, g, phase, args.workers, args.heartbeat_s, ready,
                                                   go, results)) for g in groups]
    for p in procs:
        p.start()
    for _ in procs:
        ready.get(timeout=600)  # each imports torch (through sandbox) and connects first: tens of seconds here
    start = time.time() + 1
    for _ in procs:
        go.put(start)
    sqlite = url.startswith("sqlite")
    measured_from = start + args.warm_s
    pause = threading.Event()
    pause.wait(max(0.0, measured_from - time.time()))
    cpu_start = {} if sqlite else backend_cpu(url)
    load = [os.getloadavg()[0]]  # the machine is shared: its load says how much CPU the bench could have had
    pause.wait(max(0.0, start + phase.seconds - time.time()))
    cpu_end = {} if sqlite else backend_cpu(url)
    load.append(os.getloadavg()[0])
    parts = [results.get() for _ in procs]
    for p in procs:
        p.join()
    window = phase.seconds - args.warm_s
    rows = [r for part in parts for r in part["rows"] if r[1] >= measured_from]
    by_op = {op: [d for o, _, d in rows if o == op] for op in OPS}
    claims = sum(1 for part in parts for r in part["rows"] if r[0] == "claim" and r[1] >= measured_from)
    finished = len(by_op["finish"])
    server_cpu = sum(cpu_end[p] - cpu_start.get(p, 0.0) for p in cpu_end) if not sqlite else None
    errors = [e for part in parts for e in part["errors"] if e[1] >= measured_from]
    return {
        "phase": phase.name, "target_rate": phase.rate, "seconds": window,
        "load_avg_1min": load, "errors": len(errors),
        "error_kinds": sorted({f"{op}: {why}" for op, _, why in errors})[:5],
        "claims_per_s": claims / window, "verdicts_per_s": finished / window,
        "empty_claims": sum(part["empty"] for part in parts),
        "heartbeats_per_s": len(by_op["heartbeat"]) / window, "worker_rows_per_s": len(by_op["worker_row"]) / window,
        "latency_ms": {op: {"n": len(v), "p50": 1000 * percentile(v, 0.5), "p99": 1000 * percentile(v, 0.99),
                            "max": 1000 * max(v) if v else float("nan")} for op, v in by_op.items()},
        "client_cpu_s": sum(part["cpu_s"] for part in parts),
        "server_cpu_s": server_cpu,
        "server_cpu_ms_per_verdict": 1000 * server_cpu / finished if server_cpu is not None and finished else None,
    }


def fresh_pg(server_url: str) -> str:
    name = f"kj_fleet_bench_{os.getpid()}_{uuid.uuid4().hex[:6]}"
    engine = create_engine(server_url, isolation_level="AUTOCOMMIT")
    with engine.connect() as conn:
        conn.execute(text(f'CREATE DATABASE "{name}"'))
    engine.dispose()
    return make_url(server_url).set(database=name).render_as_string(hide_password=False)


def drop_pg(server_url: str, url: str) -> None:
    engine = create_engine(server_url, isolation_level="AUTOCOMMIT")
    with engine.connect() as conn:
        conn.execute(text(f'DROP DATABASE IF EXISTS "{make_url(url).database}" WITH (FORCE)'))
    engine.dispose()


def bench(url: str, args: argparse.Namespace, phases: list[Phase]) -> list[dict]:
    upgrade(url)
    db = Database(url)
    needed = int(sum((p.rate or args.max_rate_guess) * p.seconds for p in phases) * 1.3)
    fill(db, needed)
    db.dispose()
    out = []
    for phase in phases:
        result = run_phase(url, args, phase)
        print(json.dumps(result, default=str), flush=True)
        out.append(result)
    return out


def table(name: str, results: list[dict]) -> str:
    lines = [f"### {name}", "",
             "| phase | claims/s (target) | verdicts/s | lease renewals/s + worker rows/s | claim p50 / p99 ms "
             "| heartbeat p50 / p99 ms | verdict write p50 / p99 ms | advance p50 / p99 ms "
             "| server CPU ms per job cycle | failed calls | machine load (1 min) |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in results:
        lat = r["latency_ms"]
        cpu = r["server_cpu_ms_per_verdict"]
        lines.append(
            f"| {r['phase']} | {r['claims_per_s']:.1f} ({r['target_rate'] or 'max'}) | {r['verdicts_per_s']:.1f} | "
            f"{r['heartbeats_per_s']:.1f} + {r['worker_rows_per_s']:.1f} | "
            f"{lat['claim']['p50']:.1f} / {lat['claim']['p99']:.1f} | "
            f"{lat['heartbeat']['p50']:.1f} / {lat['heartbeat']['p99']:.1f} | "
            f"{lat['finish']['p50']:.1f} / {lat['finish']['p99']:.1f} | "
            f"{lat['advance']['p50']:.1f} / {lat['advance']['p99']:.1f} | {f'{cpu:.2f}' if cpu else '-'} "
            f"| {r['errors']} | {r['load_avg_1min'][0]:.0f} -> {r['load_avg_1min'][1]:.0f} |")
    return "\n".join(lines) + "\n"


def machine() -> str:
    cpu = next((line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                if line.startswith("model name")), platform.processor())
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True).stdout
    return f"{os.cpu_count()} CPU cores ({cpu}), {platform.system()} {platform.release()}, tree at `{commit.strip()}`"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pg-url", default="postgresql+psycopg://postgres@127.0.0.1:5432/test",
                        help="a server where a database may be created (a fresh one is made and dropped)")
    parser.add_argument("--workers", type=int, default=100)
    parser.add_argument("--processes", type=int, default=4)
    parser.add_argument("--pool", type=int, default=10, help="connections per process")
    parser.add_argument("--rate", type=float, default=30.0, help="claims per second in the paced phase")
    parser.add_argument("--paced-s", type=float, default=60.0)
    parser.add_argument("--max-s", type=float, default=30.0)
    parser.add_argument("--warm-s", type=float, default=5.0, help="left out of each phase's figures")
    parser.add_argument("--heartbeat-s", type=float, default=3.0, help="each worker's heartbeat interval")
    parser.add_argument("--max-rate-guess", type=float, default=200.0, help="jobs queued per second of a max phase")
    parser.add_argument("--no-sqlite", action="store_true")
    parser.add_argument("--sqlite-s", type=float, default=30.0, help="length of each SQLite phase")
    parser.add_argument("--out", type=Path, help="write the results table (markdown) and a .json beside it")
    args = parser.parse_args()

    phases = [Phase("paced", args.paced_s, args.rate), Phase("max", args.max_s, None)]
    url = fresh_pg(args.pg_url)
    try:
        engine = create_engine(url)
        with engine.connect() as conn:
            version = conn.execute(text("SHOW server_version")).scalar()
            max_conn = conn.execute(text("SHOW max_connections")).scalar()
        engine.dispose()
        pg = bench(url, args, phases)
    finally:
        drop_pg(args.pg_url, url)
    results = {"postgresql": pg, "postgresql_version": version, "max_connections": max_conn}
    if not args.no_sqlite:
        with tempfile.TemporaryDirectory() as tmp:
            short = [Phase(p.name, args.sqlite_s, p.rate) for p in phases]
            results["sqlite"] = bench(f"sqlite:///{tmp}/fleet.db", args, short)
    results["args"] = {k: str(v) for k, v in vars(args).items()}
    results["machine"] = machine()
    target = args.rate
    best = max(r["claims_per_s"] for r in pg)
    summary = (f"PostgreSQL {version}: {pg[0]['claims_per_s']:.1f} claims/s sustained at a target of {target:g}; "
               f"at most {best:.1f} claims/s ({best / target:.1f}x the target) with {args.workers} workers")
    print(summary)
    if args.out:
        body = [f"Machine: {results['machine']}; PostgreSQL {version} (max_connections {max_conn}) on the same "
                f"machine. {args.workers} simulated workers in {args.processes} processes, {args.pool} connections "
                f"each; heartbeat every {args.heartbeat_s:g} s per worker; claim window {WINDOW}.", "", summary, "",
                table("PostgreSQL", pg)]
        if "sqlite" in results:
            body.append(table("SQLite (one file, WAL; contrast)", results["sqlite"]))
        args.out.write_text("\n".join(body))
        args.out.with_suffix(".json").write_text(json.dumps(results, indent=1, default=str))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
