"""Builders apart from the GPU (issue 43): one run worker and N builder processes against a burst of distinct kernels,
against today's single worker (role all) in the same call.

    source scripts/gpu/device_env.sh
    python3 -m scripts.gpu.builders_burst --builders 2 4 8 --baseline --count 64 --out results/builders
    python3 -m scripts.gpu.builders_burst --db postgresql://postgres@127.0.0.1:5432/postgres --builders 4 --out ...
    python3 -m scripts.gpu.builders_burst --device cpu --builders 1 --count 2 --out /tmp/bb   # the CPU path

Each arrangement (`baseline`: one `kernel-judge worker` of role all, as `serve` starts it; `builders=N`: one
`worker --role run` and N `worker --role build`, each process with its own build and cache root under --work, so
nothing travels between them but the database) runs on a fresh database (a new SQLite file, or a new database on
the PostgreSQL server --db names, dropped afterwards) and fresh caches. It waits until every worker is registered
and has built its shared headers, inserts --count submissions in one transaction (the burst: every job queued at
once, the workers woken at commit), follows them to their verdicts and reports:

- GPU busy fraction over the device stage (the first device hold to the last; service.observability.timeline) and
  over the burst;
- time from the burst to the last verdict; verdict latency p50 and p90 (submission to verdict);
- verdict counts against the declared ones (`expect:` of each corpus file), and every candidate that differs;
- the workers' artifact counters (published, installed, refused_*).

Candidates: the honest (`expect: correct`) files of tests/corpus/cuda (or tests/corpus/cpu with --device cpu) whose
kernel language this host has, taken in turn; every one gets a variant line (`# builders burst variant i`) so that
all --count have distinct build keys, as distinct LLM samples do, while each stays the same correct kernel.
Writes builders.json and builders.md (and each arrangement's worker logs) to --out. Exit status 1 when any verdict
differs from its declaration or is missing.
"""

from __future__ import annotations

import argparse
import datetime as dt
import fnmatch
import json
import math
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections import Counter
from pathlib import Path

from sqlalchemy import func, select

from scripts.gpu.burst import absent_language, declared, holds_account
from service import crud
from service.api.schemas import SubmissionCreate
from service.core.config import Settings
from service.db.migrate import upgrade
from service.db.models import Job, Submission, VerdictRow, WorkerRow
from service.db.session import Database
from service.worker import headers

ROOT = Path(__file__).resolve().parents[2]
CORPUS = {"cuda": ROOT / "tests" / "corpus" / "cuda", "cpu": ROOT / "tests" / "corpus" / "cpu"}


# --- candidates -----------------------------------------------------------------------------------------------

def candidates(device: str, count: int, include: str, exclude: list[str]) -> list[dict]:
    """`count` distinct variants of the device's honest corpus files (each keeps its declared verdict)."""
    files = [p for p in sorted(CORPUS[device].glob(include)) if p.suffix == ".py"
             and not any(fnmatch.fnmatch(p.name, pattern) for pattern in exclude)
             and declared(p).get("expect") == "correct" and "task" in declared(p)
             and absent_language(p.read_text()) is None]
    if not files:
        raise SystemExit(f"no honest corpus file matches {include!r} in {CORPUS[device]}")
    out = []
    for i in range(count):
        path = files[i % len(files)]
        source = path.read_text() + f"\n# builders burst variant {i}\n"
        out.append({"file": str(path.relative_to(ROOT)), "variant": i, "task": declared(path)["task"],
                    "expect": "correct", "source": source})
    return out


# --- databases and processes -----------------------------------------------------------------------------------

class FreshDatabase:
    """A new SQLite file under `work`, or a new database on the PostgreSQL server `server` (dropped at close)."""

    def __init__(self, server: str, work: Path) -> None:
        self.server, self.name = server, None
        if server == "sqlite":
            self.url = f"sqlite:///{(work / 'judge.db').resolve()}"
        else:
            import psycopg

            self.name = f"kj_builders_{uuid.uuid4().hex[:10]}"
            with psycopg.connect(self._dsn(server), autocommit=True) as conn:
                conn.execute(f'CREATE DATABASE "{self.name}"')
            base = server.replace("postgresql://", "postgresql+psycopg://", 1)
            self.url = base.rsplit("/", 1)[0] + f"/{self.name}"
        upgrade(self.url)

    @staticmethod
    def _dsn(url: str) -> str:
        return url.replace("postgresql+psycopg://", "postgresql://", 1)

    def close(self) -> None:
        if self.name is not None:
            import psycopg

            with psycopg.connect(self._dsn(self.server), autocommit=True) as conn:
                conn.execute(f'DROP DATABASE IF EXISTS "{self.name}" WITH (FORCE)')


def start_worker(role: str, name: str, url: str, work: Path, out: Path, device: str, slots: int | None,
                 cache_root: Path | None) -> subprocess.Popen:
    """`kernel-judge worker --role ROLE` with its own build and cache roots (`cache_root`: a given baseline and
    header cache instead, for a run of the CPU path on a small machine)."""
    env = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "JUDGE_ROLE")}
    own = work / name
    env.update(DATABASE_URL=url, JUDGE_BUILD_ROOT=str(own / "builds"),
               JUDGE_CACHE_ROOT=str(cache_root or own / "cache"), JUDGE_LOG_LEVEL="INFO")
    if role == "build":
        env["JUDGE_BUILD_TARGET"] = device
        env["JUDGE_DEVICES"] = "cpu"  # a builder executes nothing: no device of its own
    else:
        env["JUDGE_DEVICES"] = "cpu" if device == "cpu" else env.get("JUDGE_DEVICES", "cuda:0")
    if slots is not None:
        env["JUDGE_COMPILE_WORKERS"] = str(slots)
    log = open(out / f"{name}.log", "wb")
    return subprocess.Popen([sys.executable, "-m", "service.cli.main", "worker", "--no-migrate", "--role", role],
                            env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)


def stop_all(procs: list[subprocess.Popen]) -> None:
    for proc in procs:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
    deadline = time.monotonic() + 120
    for proc in procs:
        try:
            proc.wait(max(1.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(30)


def wait_ready(db: Database, procs: list[subprocess.Popen], timeout: float, warm_headers: bool) -> float:
    """Until every worker has registered and built its shared headers (`warm_headers`: the workers build some, so each
    row must have published them); returns the seconds waited."""
    started = time.monotonic()
    while time.monotonic() - started < timeout:
        if any(p.poll() is not None for p in procs):
            raise SystemExit("a worker exited before the burst: see its log under --out")
        with db.transaction(read_only=True) as s:
            rows = s.scalars(select(WorkerRow).where(WorkerRow.stopped_at.is_(None))).all()
        # A row registers before its first heartbeat publishes the header build: until then its stats hold no
        # variant, which must not read as "all built" (the night run of 2026-11-28 posted the single worker's burst
        # 3 s after its start, 33 s before its -O2 header was ready).
        variants = [(r.stats or {}).get(headers.KEY, []) for r in rows]
        if len(rows) == len(procs) and all(
                (bool(v) or not warm_headers) and all(x["state"] in (headers.READY, headers.FAILED) for x in v)
                for v in variants):
            return time.monotonic() - started
        time.sleep(1.0)
    raise SystemExit(f"the workers were not ready within {timeout:.0f} s")


def post_burst(db: Database, cands: list[dict]) -> list[str]:
    """Every candidate in one transaction: all jobs become claimable at the same commit."""
    with db.transaction() as session:
        key = crud.create_key(session, "builders-burst")[0]
        return [crud.create_submission(session, key, SubmissionCreate(task=c["task"], source=c["source"],
                                                                      model="builders-burst")).submission.id
                for c in cands]


def follow(db: Database, ids: list[str], procs: list[subprocess.Popen], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and any(p.poll() is None for p in procs):
        with db.transaction(read_only=True) as s:
            done = s.scalar(select(func.count()).select_from(VerdictRow).where(VerdictRow.submission_id.in_(ids)))
        if done == len(ids):
            return
        time.sleep(1.0)


# --- one arrangement -------------------------------------------------------------------------------------------

def arrangement(label: str, builders: int, args: argparse.Namespace, cands: list[dict]) -> dict:
    work = args.work / label
    out = args.out / label
    work.mkdir(parents=True, exist_ok=True)
    out.mkdir(parents=True, exist_ok=True)
    fresh = FreshDatabase(args.db, work)
    db = Database(fresh.url)
    procs: list[subprocess.Popen] = []
    try:
        if builders == 0:
            procs.append(start_worker("all", "worker", fresh.url, work, out, args.device, args.compile_workers,
                                      args.cache_root))
        else:
            procs.append(start_worker("run", "runner", fresh.url, work, out, args.device, args.run_slots,
                                      args.cache_root))
            procs += [start_worker("build", f"builder-{i}", fresh.url, work, out, args.device, args.builder_slots,
                                   builder_cache(args, i)) for i in range(builders)]
        ready_s = wait_ready(db, procs, args.ready_timeout, bool(Settings().warm_flag_sets()))
        burst_at = dt.datetime.now(dt.timezone.utc).replace(tzinfo=None)
        ids = post_burst(db, cands)
        follow(db, ids, procs, args.timeout)
        report = account(db, fresh.url, label, builders, cands, ids, burst_at)
        report["ready_s"] = round(ready_s, 1)
    finally:
        stop_all(procs)
        db.dispose()
    report["workers"] = worker_counters(fresh.url)
    fresh.close()
    return report


def builder_cache(args: argparse.Namespace, i: int) -> Path | None:
    """Builder i's cache root: fresh per arrangement (None), the given one on the CPU path, or with
    --keep-builder-headers its own from one arrangement to the next. A builder's cache root holds only its shared
    headers and the nvcc driver (it executes nothing: no baselines); its build root and the database stay fresh, so
    no candidate's build is reused, and the burst waits for every worker's headers either way: only the device time
    spent building the same headers again is saved."""
    if args.device != "cuda":
        return args.cache_root
    return args.work / "builder-caches" / f"builder-{i}" if args.keep_builder_headers else None


def account(db: Database, url: str, label: str, builders: int, cands: list[dict], ids: list[str],
            burst_at: dt.datetime) -> dict:
    with db.transaction(read_only=True) as s:
        got = {sub: (status, created, finished) for sub, status, created, finished in s.execute(
            select(Submission.id, VerdictRow.status, Submission.created_at, Job.finished_at)
            .join(Job, Job.submission_id == Submission.id)
            .join(VerdictRow, VerdictRow.submission_id == Submission.id, isouter=True)
            .where(Submission.id.in_(ids)))}
    rows = []
    for cand, sub in zip(cands, ids):
        status, created, finished = got.get(sub, (None, None, None))
        value = status.value if status is not None else None
        rows.append({"id": sub, "file": cand["file"], "variant": cand["variant"], "expect": cand["expect"],
                     "status": value, "as_expected": value == cand["expect"],
                     "latency_s": (finished - created).total_seconds() if finished and created else None})
    end = max([burst_at, *(f for _, _, f in got.values() if f)])
    latencies = sorted(r["latency_s"] for r in rows if r["latency_s"] is not None)
    holds = holds_account(url, rows, burst_at, end)
    holds.pop("svg", None)
    return {"label": label, "builders": builders, "count": len(rows), "done": len(latencies),
            "last_verdict_s": (end - burst_at).total_seconds(),
            "p50_latency_s": statistics.median(latencies) if latencies else None,
            "p90_latency_s": latencies[math.ceil(0.9 * len(latencies)) - 1] if latencies else None,  # nearest rank
            "gpu_busy_stage": holds["busy_fraction_stage"], "gpu_busy_burst": holds["busy_fraction_burst"],
            "device_s_per_candidate": holds["device_s_per_candidate"], "overlaps": holds["overlaps"],
            "verdicts": dict(Counter(r["status"] or "none" for r in rows)),
            "declared": dict(Counter(r["expect"] for r in rows)),
            "as_expected": sum(r["as_expected"] for r in rows),
            "differing": [r for r in rows if not r["as_expected"]], "candidates": rows}


def worker_counters(url: str) -> list[dict]:
    db = Database(url)
    try:
        with db.transaction(read_only=True) as s:
            return [{"worker": r.id, "role": r.role, "artifacts": (r.stats or {}).get("artifacts", {}),
                     "outcomes": (r.stats or {}).get("outcomes", {})} for r in s.scalars(select(WorkerRow))]
    finally:
        db.dispose()


# --- report ----------------------------------------------------------------------------------------------------

def markdown(results: list[dict], args: argparse.Namespace) -> str:
    lines = [f"# Builders apart from the GPU: {args.count} distinct {args.device} kernels, database {args.db_kind}",
             "", f"Host: {os.uname().nodename}, {os.cpu_count()} CPUs; {dt.datetime.now(dt.timezone.utc):%Y-%m-%d}.",
             "", "| arrangement | busy over device stage | busy over burst | last verdict s | p50 s | p90 s | "
             "as declared | verdicts | artifacts |", "|---|---|---|---|---|---|---|---|---|"]
    for r in results:
        busy = ", ".join(f"{v:.0%}" for v in r["gpu_busy_stage"].values()) or "-"
        burst = ", ".join(f"{v:.0%}" for v in r["gpu_busy_burst"].values()) or "-"
        arts = Counter()
        for w in r["workers"]:
            arts.update(w["artifacts"])
        p50 = "-" if r["p50_latency_s"] is None else f"{r['p50_latency_s']:.1f}"
        p90 = "-" if r["p90_latency_s"] is None else f"{r['p90_latency_s']:.1f}"
        lines.append(f"| {r['label']} | {busy} | {burst} | {r['last_verdict_s']:.1f} | {p50} | {p90} | "
                     f"{r['as_expected']} of {r['count']} | {json.dumps(r['verdicts'])} | {json.dumps(dict(arts))} |")
    for r in results:
        for d in r["differing"]:
            lines.append(f"- {r['label']}: {d['file']} variant {d['variant']}: {d['status']} (declared {d['expect']})")
    return "\n".join(lines) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--builders", type=int, nargs="*", default=[2, 4, 8], help="builder counts to run (N each)")
    parser.add_argument("--baseline", action="store_true", help="also run today's single worker (role all)")
    parser.add_argument("--count", type=int, default=64, help="distinct candidates in each burst")
    parser.add_argument("--device", choices=["cuda", "cpu"], default="cuda")
    parser.add_argument("--db", default="sqlite", help="sqlite, or a PostgreSQL server URL (a fresh database each)")
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--work", type=Path, default=None, help="caches and SQLite files (default: a temp dir)")
    parser.add_argument("--include", default="*.py", help="corpus file name pattern (default: every honest file)")
    parser.add_argument("--exclude", nargs="*", default=[],
                        help="corpus file name patterns left out (the training files: their device holds of 6-13 s "
                             "a candidate would measure the GPU, not whether the builds keep it fed)")
    parser.add_argument("--builder-slots", type=int, default=2, help="JUDGE_COMPILE_WORKERS of each builder")
    parser.add_argument("--run-slots", type=int, default=None, help="JUDGE_COMPILE_WORKERS of the run worker")
    parser.add_argument("--compile-workers", type=int, default=None, help="the baseline worker's (default: its own)")
    parser.add_argument("--cache-root", type=Path, default=None,
                        help="a baseline and header cache to reuse (default: fresh per worker; for the CPU path)")
    parser.add_argument("--keep-builder-headers", action="store_true",
                        help="each builder keeps its cache root (its headers) across arrangements")
    parser.add_argument("--ready-timeout", type=float, default=1800.0)
    parser.add_argument("--timeout", type=float, default=3600.0, help="seconds to wait for the last verdict")
    args = parser.parse_args()
    args.db_kind = "SQLite" if args.db == "sqlite" else "PostgreSQL"
    args.out.mkdir(parents=True, exist_ok=True)
    args.work = args.work or Path(tempfile.mkdtemp(prefix="kj-builders-"))
    cands = candidates(args.device, args.count, args.include, args.exclude)
    plan = ([("baseline", 0)] if args.baseline else []) + [(f"builders={n}", n) for n in args.builders if n > 0]
    results = []
    for label, n in plan:
        print(f"--- {label}", flush=True)
        results.append(arrangement(label, n, args, cands))
        (args.out / "builders.json").write_text(json.dumps(results, indent=1, default=str))
    text = markdown(results, args)
    (args.out / "builders.md").write_text(text)
    print(text)
    return 0 if all(r["as_expected"] == r["count"] for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
