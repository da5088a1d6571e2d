"""One batch through the service on one device or several, one worker process or several: the device-busy figures.

    # one worker (kernel-judge serve, its embedded worker), one GPU, then two GPUs; then one worker per GPU
    python3 scripts/bench/bench_multi_device.py run --devices cuda:0 --out results/one
    python3 scripts/bench/bench_multi_device.py run --devices cuda:0,cuda:1 --out results/two
    python3 scripts/bench/bench_multi_device.py run --devices cuda:0,cuda:1 --workers 2 \\
        --database-url postgresql+psycopg://postgres@127.0.0.1:5432/kj_multi --fresh-db --out results/two-workers
    python3 scripts/bench/bench_multi_device.py compare results/one results/two results/two-workers

`run` starts the service as the README does (`kernel-judge serve`, whose embedded worker gets
JUDGE_DEVICES=--devices; or, with --workers N, `kernel-judge serve --no-worker` and N `kernel-judge worker`
processes, the devices dealt out among them, each with its own JUDGE_DEVICES, all on one database), waits until
every worker has registered, uploads one batch built from the corpus directories (--candidates; every file
declares `task:` and `expect:`; honest files are also sent as --replicas copies differing by a comment, so that
one honest kernel is judged on each device), waits for its last verdict, and prints:

- the batch's device stage: first execute start to last execute end over all its holds (the worker stamps both on
  the claim record, service.worker.holds), and each device's busy seconds and fraction of that span;
- the timeline SVG (one lane per device) and the text summary (service.observability.timeline);
- each candidate's verdict and whether it is the one its file declares;
- whether every job was claimed exactly once, and whether any device ran two jobs at once;
- for honest kernels: the median time on each device, and the largest difference between devices.

It writes run.json (every figure, for `compare`), timeline.svg, summary.txt, batch.jsonl and the logs to --out.
`compare` reads several run.json files: the device stage of each against the first (the issue asks for two GPUs
in <= 55% of one GPU's time), whether every candidate got the same status in every run, and each honest kernel's
median across runs and devices.

CPU devices: `cpu:0,cpu:1` are two executors on the CPU (the worker accepts `cpu:N`), so the multi-executor path
runs without GPUs; they share the CPU's cores, so their timings are not independent. `--mode compile-only` runs
the real compile but not the candidates (its holds are instants): use it to fill the build cache before a
measured run, so the measured device stage is not fed by cold compiles.
"""

from __future__ import annotations

import argparse
import datetime as dt
import fnmatch
import json
import os
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter, defaultdict
from pathlib import Path

import httpx

from service.client import JudgeClient, JudgeError

ROOT = Path(__file__).resolve().parents[2]
CLI = [sys.executable, "-m", "service.cli.main"]
ADMIN = "bench-multi-admin"
META = re.compile(r"^(task|expect):\s*(\S+)", re.MULTILINE)


# --- the batch ----------------------------------------------------------------------------------------


def _name(path: Path) -> str:
    path = path.resolve()
    return str(path.relative_to(ROOT / "tests")) if path.is_relative_to(ROOT / "tests") else str(path)


def corpus_lines(dirs: list[Path], tasks: set[str], replicas: int, replica_glob: str, exclude: list[str]
                 ) -> list[dict]:
    """One line per corpus file of a known task, then `replicas` copies of each honest .py file (a trailing
    comment makes each a distinct candidate: its own build, its own job, not folded into the first)."""
    lines, honest = [], []
    for d in dirs:
        for path in sorted(d.iterdir()):
            if not path.is_file() or any(fnmatch.fnmatch(path.name, pat) for pat in exclude):
                continue
            meta = dict(META.findall(path.read_text(errors="replace")))
            if meta.get("task") not in tasks or "expect" not in meta:
                continue
            text = path.read_text()
            field = "completion" if path.suffix == ".md" else "source"
            line = {"task": meta["task"], field: text, "model": "corpus",
                    "metadata": {"file": _name(path), "expect": meta["expect"], "copy": 0}}
            lines.append(line)
            if meta["expect"] == "correct" and path.suffix == ".py" and fnmatch.fnmatch(path.name, replica_glob):
                honest.append(line)
    for copy in range(1, replicas + 1):
        for line in honest:
            lines.append({**line, "source": f"{line['source']}\n# replica {copy}\n",
                          "metadata": {**line["metadata"], "copy": copy}})
    for index, line in enumerate(lines):
        line["sample_index"] = index
    return lines


# --- the service --------------------------------------------------------------------------------------


def deal(devices: list[str], workers: int) -> list[list[str]]:
    """Devices dealt round-robin to `workers` processes (cuda:0,cuda:1 over 2 workers: one each)."""
    groups = [devices[i::workers] for i in range(workers)]
    if any(not g for g in groups):
        raise SystemExit(f"--workers {workers} needs at least as many devices as workers ({len(devices)} given)")
    return groups


def fresh_database(url: str) -> None:
    """Drop and create the PostgreSQL database the URL names (the server's `postgres` database does the DDL)."""
    import psycopg
    from sqlalchemy.engine import make_url

    parsed = make_url(url)
    server = parsed.set(drivername="postgresql", database="postgres").render_as_string(hide_password=False)
    with psycopg.connect(server, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{parsed.database}" WITH (FORCE)')
        conn.execute(f'CREATE DATABASE "{parsed.database}"')


class Service:
    """`kernel-judge serve` (+ workers) in their own process groups; logs under `out`."""

    def __init__(self, out: Path, env: dict[str, str], port: int) -> None:
        self.out, self.env, self.port = out, env, port
        self.base = f"http://127.0.0.1:{port}"
        self.procs: list[tuple[str, subprocess.Popen]] = []

    def start(self, name: str, argv: list[str], **env: str) -> None:
        log = open(self.out / f"{name}.log", "wb")
        proc = subprocess.Popen(argv, cwd=ROOT, env={**self.env, **env}, stdout=log, stderr=subprocess.STDOUT,
                                start_new_session=True)
        self.procs.append((name, proc))

    def wait(self, what: str, condition, timeout: float) -> None:  # noqa: ANN001
        deadline = time.monotonic() + timeout
        while not condition():
            for name, proc in self.procs:
                if proc.poll() is not None:
                    raise SystemExit(f"{name} exited ({proc.returncode}) while waiting for {what}: see "
                                     f"{self.out / (name + '.log')}")
            if time.monotonic() > deadline:
                raise SystemExit(f"timed out waiting for {what}")
            time.sleep(0.5)

    def wait_ready(self, timeout: float) -> None:
        """Until the API answers /readyz, stopping at once when one of the processes has exited."""
        with JudgeClient(self.base, key="") as judge:
            try:
                judge.wait_ready(timeout, alive=lambda: all(proc.poll() is None for _, proc in self.procs))
            except JudgeError as exc:
                raise SystemExit(f"the API was not ready ({exc}): see the logs in {self.out}") from None

    def workers(self) -> list[dict]:
        answer = httpx.get(f"{self.base}/v1/admin/workers", headers={"Authorization": f"Bearer {ADMIN}"}, timeout=10)
        body = answer.json()
        rows = body if isinstance(body, list) else body.get("workers", [])
        return [w for w in rows if not w.get("stopped_at")]

    def stop(self) -> None:
        # serve first: it stops its embedded worker; then the standalone workers (SIGTERM: finish, release).
        for _name, proc in self.procs:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGTERM)
        for _name, proc in self.procs:
            try:
                proc.wait(120)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(30)


def submit_batch(stem: Path, lines: list[dict], env: dict[str, str], db_url: str, timeout: float
                 ) -> tuple[str, float]:
    """Upload STEM.jsonl with `kernel-judge batch` and wait until every job of the batch is final; returns the
    batch id and the monotonic time it ended. Waiting reads the database, not the API: under load an API read
    can answer 503 (the CLI's --watch then gives up), and the figures come from the database anyway."""
    upload = stem.with_suffix(".jsonl")
    upload.write_text("".join(json.dumps(line) + "\n" for line in lines))
    done = subprocess.run([*CLI, "batch", str(upload), "--name", stem.name], cwd=ROOT, env=env, capture_output=True,
                          text=True, check=False)
    stem.with_suffix(".log").write_text(done.stdout + "\n--- stderr ---\n" + done.stderr)
    if done.returncode != 0 or not done.stdout.strip():
        raise SystemExit(f"the batch upload failed ({done.returncode}): {done.stderr[-2000:]}")
    batch_id = done.stdout.split("\n", 1)[0].strip()
    return batch_id, wait_final(db_url, batch_id, timeout)


def wait_final(db_url: str, batch_id: str, timeout: float) -> float:
    """Poll the database until no job of the batch is queued or held (or `timeout` passes)."""
    from sqlalchemy import func, select

    from service.db.models import Job, Submission
    from service.db.session import Database
    from service.queue.states import FINAL

    db = Database(db_url)
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:
            with db.transaction(read_only=True) as s:
                left = s.scalar(select(func.count()).select_from(Job)
                                .join(Submission, Submission.id == Job.submission_id)
                                .where(Submission.batch_id == batch_id, Job.state.not_in(FINAL)))
            if left == 0:
                return time.monotonic()
            time.sleep(1.0)
        print(f"batch {batch_id}: not finished after {timeout:.0f} s; the figures below are partial", flush=True)
        return time.monotonic()
    finally:
        db.dispose()


# --- what happened ------------------------------------------------------------------------------------


def collect(db_url: str, batch_id: str) -> dict:
    """Read the batch's jobs, claims, holds and verdicts from the database."""
    from sqlalchemy import func, select

    from service.db.models import Job, JobAttempt, Submission, VerdictRow
    from service.db.session import Database
    from service.observability import timeline

    db = Database(db_url)
    with db.transaction(read_only=True) as s:
        holds = timeline.load_holds(s, batch_id=batch_id)
        unplaced = timeline.executed_without_hold(s, batch_id=batch_id)
        rows = s.execute(select(Submission.id, Submission.line, Submission.sample_metadata, Submission.duplicate_of,
                                Job.id,
                                Job.state, Job.claims, VerdictRow.status, VerdictRow.median_ms,
                                VerdictRow.diagnosis, VerdictRow.verdict)
                         .outerjoin(Job, Job.submission_id == Submission.id)
                         .outerjoin(VerdictRow, VerdictRow.submission_id == Submission.id)
                         .where(Submission.batch_id == batch_id).order_by(Submission.line)).all()
        attempts = dict(s.execute(select(JobAttempt.job_id, func.count()).join(Job, Job.id == JobAttempt.job_id)
                                  .join(Submission, Submission.id == Job.submission_id)
                                  .where(Submission.batch_id == batch_id).group_by(JobAttempt.job_id)).all())
        outcomes = Counter(o for (o,) in s.execute(
            select(JobAttempt.outcome).join(Job, Job.id == JobAttempt.job_id)
            .join(Submission, Submission.id == Job.submission_id).where(Submission.batch_id == batch_id)))
    db.dispose()
    lane_of = {h.job_id: h.lane for h in holds if h.result not in ("retry", "released", "crashed", "expired")}
    # A duplicate (the same extracted code as an earlier sample) has no job: it shares that sample's verdict.
    judged = {r[0]: r for r in rows}
    candidates = []
    for sub_id, line, meta, duplicate_of, job_id, state, claims, status, median, diagnosis, verdict in rows:
        if duplicate_of in judged:
            _, _, _, _, job_id, state, _, status, median, diagnosis, verdict = judged[duplicate_of]
        cost = ((verdict or {}).get("details") or {}).get("cost") or {}
        spare = cost.get("pre_started") or {}
        meta = meta or {}
        expect = meta.get("expect", "")
        candidates.append({"line": line, "file": meta.get("file"), "copy": meta.get("copy", 0), "expect": expect,
                           "status": status.value if status else (state.value if state else "no job"),
                           "as_expected": bool(status and re.fullmatch(expect.strip("()"), status.value)),
                           "median_ms": median, "lane": lane_of.get(job_id), "claims": claims,
                           "attempts": attempts.get(job_id, 0), "diagnosis": (diagnosis or "")[:160],
                           # Where a hold's seconds went: the verdict's own account (None without a pre-started
                           # child, or for a job that never reached a device).
                           "held_s": cost.get("device_held_s"),
                           "spare_wait_s": spare.get("acquire_wait_s"), "gate_wait_s": spare.get("gate_wait_s"),
                           "stages": (verdict or {}).get("stages") or {},
                           "duplicate": duplicate_of is not None})
    return {"holds": holds, "unplaced": unplaced, "candidates": candidates, "outcomes": dict(outcomes)}


def honest_medians(candidates: list[dict]) -> dict[str, dict[str, list[float]]]:
    """file -> lane -> medians (ms) of its correct copies judged there."""
    out: dict[str, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    for c in candidates:
        if c["expect"] == "correct" and c["status"] == "correct" and c["median_ms"] and c["lane"]:
            out[c["file"]][c["lane"]].append(c["median_ms"])
    return {f: dict(lanes) for f, lanes in out.items()}


def spread(per_lane: dict[str, list[float]]) -> float | None:
    """Largest relative difference between the lanes' medians of one kernel (None with fewer than two lanes)."""
    meds = [statistics.median(v) for v in per_lane.values() if v]
    return (max(meds) - min(meds)) / min(meds) if len(meds) >= 2 else None


def held_account(candidates: list[dict]) -> str:
    """The run's held seconds, its waits for a spare, and its largest stages, summed over its judged jobs: where two
    runs of one batch differ in device time, this says in which part."""
    judged = [c for c in candidates if not c["duplicate"] and c.get("held_s") is not None]
    if not judged:
        return "not recorded"
    total = defaultdict(float)
    for c in judged:
        for name, seconds in c.get("stages", {}).items():
            if isinstance(seconds, (int, float)):
                total[name] += seconds
    largest = sorted(total.items(), key=lambda kv: -kv[1])[:6]
    return (f"{len(judged)} holds, held {sum(c['held_s'] for c in judged):.1f} s, "
            f"waited for a spare {sum(c.get('spare_wait_s') or 0 for c in judged):.1f} s, "
            f"for a spare's device set-up {sum(c.get('gate_wait_s') or 0 for c in judged):.1f} s; stages: "
            + ", ".join(f"{name} {seconds:.1f}" for name, seconds in largest))


def report(run: dict) -> str:
    c = run["candidates"]
    lines = [f"configuration: {run['config']}",
             f"batch {run['batch_id']}: {len(c)} candidates, wall time upload to last verdict {run['wall_s']:.1f} s",
             f"device stage (first execute start to last execute end): {run['stage_s']:.2f} s",
             *(f"  {lane}: busy {b:.2f} s = {run['busy_fraction'][lane] * 100:.1f}% of the stage, "
               f"{run['holds_per_lane'][lane]} holds" for lane, b in run["busy_s"].items()),
             f"timeline: {run['svg']}",
             f"every job claimed exactly once: {run['claimed_once']} (claims per job: {run['claims_histogram']}; "
             f"claim outcomes: {run['outcomes']})",
             f"a device ran two jobs at once: {bool(run['overlaps'])} ({len(run['overlaps'])} overlaps)",
             f"executed claims the timeline could not place: {run['unplaced']}",
             f"verdicts as their files declare: {sum(x['as_expected'] for x in c)} of {len(c)}",
             f"where the held seconds went: {held_account(c)}",
             "", "| line | file | copy | expected | verdict | device | median ms | claims |",
             "|---|---|---|---|---|---|---|---|"]
    for x in c:
        mark = "" if x["as_expected"] else " (!)"
        med = f"{x['median_ms']:.4f}" if x["median_ms"] else ""
        lines.append(f"| {x['line']} | {x['file']} | {x['copy']} | {x['expect']} | {x['status']}{mark} | "
                     f"{x['lane'] or ''} | {med} | {'shared' if x['duplicate'] else x['claims']} |")
    lines += ["", "honest kernels, median of their copies' medians per device (ms):"]
    for f, per_lane in run["honest"].items():
        cells = ", ".join(f"{lane} {statistics.median(v):.4f} (n={len(v)})" for lane, v in sorted(per_lane.items()))
        d = spread(per_lane)
        lines.append(f"  {f}: {cells}" + (f"; difference {d * 100:.1f}%" if d is not None else "; one device only"))
    return "\n".join(lines)


# --- commands -----------------------------------------------------------------------------------------


def run(args: argparse.Namespace) -> int:
    from service.observability import timeline

    out = args.out.resolve()
    out.mkdir(parents=True, exist_ok=True)
    devices = [d.strip() for d in args.devices.split(",") if d.strip()]
    data = Path(tempfile.mkdtemp(prefix="judge-multi-"))
    db_url = args.database_url or f"sqlite:///{data / 'judge.db'}"
    if args.fresh_db:
        if db_url.startswith("sqlite"):
            raise SystemExit("--fresh-db is for PostgreSQL; a SQLite run always starts from a new file")
        fresh_database(db_url)
    env = {**os.environ, "DATABASE_URL": db_url, "JUDGE_ADMIN_KEY": ADMIN, "JUDGE_DATA_DIR": str(data),
           "JUDGE_MODE": args.mode, "JUDGE_RATE_LIMIT_BURST": "10000", "JUDGE_LOG_LEVEL": "INFO"}
    for item in args.env:
        name, _, value = item.partition("=")
        env[name] = value
    service = Service(out, env, args.port)
    groups = [devices] if args.workers == 1 else deal(devices, args.workers)
    config = (f"{args.workers} worker process(es): " + " + ".join(",".join(g) for g in groups)
              + f"; database {'SQLite' if db_url.startswith('sqlite') else 'PostgreSQL'}; judge {args.mode}")
    print(config, flush=True)
    try:
        if args.workers == 1:
            service.start("serve", [*CLI, "serve", "--port", str(args.port)], JUDGE_DEVICES=",".join(devices))
        else:
            service.start("serve", [*CLI, "serve", "--no-worker", "--port", str(args.port)])
        service.wait_ready(180)
        if args.workers > 1:
            for i, group in enumerate(groups):
                service.start(f"worker-{i}", [*CLI, "worker", "--no-migrate"], JUDGE_DEVICES=",".join(group))
        service.wait(f"{args.workers} worker(s) to register", lambda: len(service.workers()) >= args.workers, 300)
        tasks = {t["id"] for t in httpx.get(f"{service.base}/v1/tasks", timeout=10).json()} & set(args.tasks)
        lines = corpus_lines(args.candidates, tasks, args.replicas, args.replica_glob, args.exclude)
        if len(lines) < args.min_candidates:
            raise SystemExit(f"{len(lines)} candidates; at least {args.min_candidates} wanted (add directories "
                             "with --candidates or copies with --replicas)")
        key = httpx.post(f"{service.base}/v1/keys", json={"submitter": "bench-multi"},
                         headers={"Authorization": f"Bearer {ADMIN}"}, timeout=30).json()["key"]
        client_env = {**env, "JUDGE_URL": service.base, "JUDGE_API_KEY": key, "COLUMNS": "140"}
        if args.warm:
            # Baselines (eager, torch.compile) are measured on a device model's first job of each task, in its
            # device time: one honest job per task first, in a batch of its own, so the measured one starts warm.
            warm = {line["task"]: {**line, "source": line["source"] + "\n# warm-up\n"}
                    for line in reversed(lines) if line["metadata"]["expect"] == "correct" and "source" in line}
            began = time.monotonic()
            _, ended = submit_batch(out / "warm", list(warm.values()), client_env, db_url, args.timeout)
            print(f"warm-up: {len(warm)} job(s) in {ended - began:.1f} s", flush=True)
        started = time.monotonic()
        batch_id, _ = submit_batch(out / "batch", lines, client_env, db_url, args.timeout)
        wall = time.monotonic() - started
    finally:
        service.stop()

    found = collect(db_url, batch_id)
    holds = found["holds"]
    window = timeline.span(holds)
    stage = (window[1] - window[0]).total_seconds() if window else 0.0
    busy = timeline.busy_seconds(holds, *window) if window else {}
    svg = out / "timeline.svg"
    svg.write_text(timeline.render_svg(holds, title=f"device holds: {config}"))
    (out / "summary.txt").write_text(timeline.summary(holds) + "\n")
    claims = Counter(c["attempts"] for c in found["candidates"] if not c["duplicate"])
    result = {
        "config": config, "devices": devices, "workers": args.workers, "mode": args.mode, "batch_id": batch_id,
        "date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"), "wall_s": wall, "stage_s": stage,
        "busy_s": busy, "busy_fraction": {k: (v / stage if stage else 0.0) for k, v in busy.items()},
        "holds_per_lane": {k: len(v) for k, v in timeline.by_lane(holds).items()},
        "claimed_once": set(claims) == {1}, "claims_histogram": dict(sorted(claims.items())),
        "outcomes": found["outcomes"], "unplaced": found["unplaced"], "svg": str(svg),
        "overlaps": [{"lane": o.lane, "jobs": [o.first.job_id, o.second.job_id], "seconds": o.seconds}
                     for o in timeline.overlaps(holds)],
        "candidates": found["candidates"], "honest": honest_medians(found["candidates"]),
    }
    (out / "run.json").write_text(json.dumps(result, indent=1, default=str))
    text = report(result) + "\n\n" + timeline.summary(holds)
    (out / "report.md").write_text(text + "\n")
    print(text)
    return 0 if result["claimed_once"] and not result["overlaps"] else 1


def compare(args: argparse.Namespace) -> int:
    runs = [json.loads((d / "run.json").read_text()) for d in args.runs]
    base = runs[0]
    print("| run | configuration | device stage s | vs first | busy per device |\n|---|---|---|---|---|")
    for d, r in zip(args.runs, runs):
        busy = ", ".join(f"{lane} {f * 100:.0f}%" for lane, f in r["busy_fraction"].items())
        config = r["config"].replace("|", "+")  # run.json files written before the separator was "+"
        print(f"| {d.name} | {config} | {r['stage_s']:.1f} | {r['stage_s'] / base['stage_s'] * 100:.0f}% | {busy} |")
    statuses = [{(c["file"], c["copy"]): c["status"] for c in r["candidates"]} for r in runs]
    differ = sorted({k for s in statuses for k in s if len({t.get(k) for t in statuses}) > 1})
    print(f"\nverdict statuses identical in every run: {not differ}"
          + "".join(f"\n  {f} copy {c}: " + " / ".join(str(s.get((f, c))) for s in statuses) for f, c in differ))
    print(f"every job claimed exactly once in every run: {all(r['claimed_once'] for r in runs)}; "
          f"overlaps: {sum(len(r['overlaps']) for r in runs)}")
    for d, r in zip(args.runs[1:], runs[1:]):
        if len(r["busy_s"]) > len(base["busy_s"]):
            ratio = r["stage_s"] / base["stage_s"]
            print(f"{d.name}: device stage {ratio * 100:.0f}% of {args.runs[0].name}'s "
                  f"({'within' if ratio <= args.stage_limit else 'OVER'} the {args.stage_limit * 100:.0f}% asked)")
    print("\nwhere the held seconds went, summed over each run's jobs (a hold's own account, `details.cost` and "
          "`stages` of its verdict; rows absent from run.json files written before they were recorded):")
    for d, r in zip(args.runs, runs):
        print(f"  {d.name}: {held_account(r['candidates'])}")
    print("\nhonest kernels, median per device per run (ms), and the largest difference between devices:")
    for f in sorted({f for r in runs for f in r["honest"]}):
        merged: dict[str, list[float]] = defaultdict(list)
        cells = []
        for d, r in zip(args.runs, runs):
            for lane, v in sorted(r["honest"].get(f, {}).items()):
                merged[lane] += v
                cells.append(f"{d.name} {lane} {statistics.median(v):.4f}")
        within = [spread(r["honest"][f]) for r in runs if f in r["honest"]]
        within = [w for w in within if w is not None]
        worst = spread(merged)
        print(f"  {f}: {'; '.join(cells)}"
              + (f"; devices of one run differ by at most {max(within) * 100:.1f}%" if within else "")
              + (f"; all runs, per device: {worst * 100:.1f}% ({'within' if worst <= args.median_limit else 'OVER'} "
                 f"{args.median_limit * 100:g}%)" if worst is not None else ""))
    return 0 if not differ else 1


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    r = sub.add_parser("run", help="judge one batch with one configuration")
    r.add_argument("--devices", required=True, help="e.g. cuda:0 / cuda:0,cuda:1 / cpu:0,cpu:1")
    r.add_argument("--workers", type=int, default=1, help="worker processes; >1: serve --no-worker + N workers, "
                   "the devices dealt round-robin (default 1: serve's embedded worker gets every device)")
    r.add_argument("--database-url", help="default: a new SQLite file; e.g. postgresql+psycopg://postgres@host/db")
    r.add_argument("--fresh-db", action="store_true", help="drop and create the PostgreSQL database first")
    r.add_argument("--candidates", type=Path, nargs="+",
                   default=[ROOT / "tests/corpus/cuda", ROOT / "tests/corpus/hostile/cuda"])
    r.add_argument("--tasks", nargs="+", default=["kl_div", "cross_entropy"])
    r.add_argument("--exclude", nargs="*", default=[], help="file name patterns to leave out")
    r.add_argument("--replicas", type=int, default=3, help="extra copies of each honest .py file (default 3)")
    r.add_argument("--replica-glob", default="*", help="only honest files matching this get copies")
    r.add_argument("--min-candidates", type=int, default=40)
    r.add_argument("--mode", default="sandbox", choices=["sandbox", "compile-only"])
    r.add_argument("--warm", action="store_true", help="judge one honest job per task first, in its own batch, "
                   "so the baselines are measured before the measured batch starts")
    r.add_argument("--env", nargs="*", default=[], help="NAME=VALUE for every service process")
    r.add_argument("--port", type=int, default=8767)
    r.add_argument("--timeout", type=float, default=3600, help="stop waiting for the batch after this long")
    r.add_argument("--out", type=Path, default=ROOT / "results" / "multi-device")
    c = sub.add_parser("compare", help="compare run.json files of several runs (the first is the reference)")
    c.add_argument("runs", type=Path, nargs="+")
    c.add_argument("--stage-limit", type=float, default=0.55, help="device stage with more devices / the first's")
    c.add_argument("--median-limit", type=float, default=0.02, help="honest medians' largest device difference")
    args = parser.parse_args()
    return run(args) if args.command == "run" else compare(args)


if __name__ == "__main__":
    sys.exit(main())
