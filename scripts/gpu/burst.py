"""A burst on a fresh `kernel-judge serve` (issue 24): every verdict, the time to the last one, and device holds.

    source scripts/gpu/device_env.sh && python3 scripts/gpu/burst.py --count 64 --out results/burst
    python3 scripts/gpu/burst.py --device cpu --count 6 --out /tmp/burst    # the same on the CPU corpus

On a fresh H100 host, 32 submissions POSTed at once got 8 jobs claimed and no verdict for 8 minutes. This starts
`kernel-judge serve` as the README does, on a fresh data directory (its default SQLite database) and fresh build
and baseline caches under --work, waits for /readyz, mints a key, POSTs --count candidates at once (every request
is sent before any answer is awaited), follows each to its verdict and writes burst.md and burst.json to --out:

- the time from the burst to the last verdict;
- every candidate's verdict against the one its corpus file declares (`expect:`); a file in a kernel language this
  host lacks (sandbox/shared/languages.py) is expected to be refused for that, as compile_error naming the package;
- the device holds (service.observability.timeline, the same code as scripts/bench/bench_multi_device.py): each
  device's busy fraction over the burst and over its device stage, device seconds per candidate, the longest hold
  of each candidate, and the holds longer than the slowest honest (`expect: correct`, judged correct) one.

Candidates: the corpus files of the device (CUDA: tests/corpus/cuda and tests/corpus/hostile/cuda; CPU:
tests/corpus/cpu) that declare `task:` and `expect:`, taken in turn until --count; each repeat of a file gets a
trailing comment, so it is its own build as distinct LLM samples are (--same-copies: identical copies, one build).
The service's own logs are in --out/serve.log; on a timeout the report says which submissions had no verdict and
the exit status is 1, as it is when any verdict differs from its declaration.
"""

from __future__ import annotations

import argparse
import ast
import asyncio
import datetime as dt
import fnmatch
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

from sandbox.shared import languages
from service.client import JudgeClient
from service.client.errors import JudgeError
from service.db.session import Database
from service.observability import timeline

ROOT = Path(__file__).resolve().parents[2]
"""The repository: where the corpus is (files only; the code comes from the installed package)."""
CORPUS = {"cuda": ["tests/corpus/cuda", "tests/corpus/hostile/cuda"], "cpu": ["tests/corpus/cpu"]}
HEADER = re.compile(r"^(expect|task):\s*(.+?)\s*$", re.M)
"""The corpus files' header lines, as tests/sandbox/conftest.py reads them."""
ADMIN = "burst-admin"


# --- the candidates -------------------------------------------------------------------------------------------

def declared(path: Path) -> dict[str, str]:
    """`expect:` and `task:` from a corpus file's header."""
    return dict(HEADER.findall(path.read_text(encoding="utf-8", errors="replace")[:3000]))


def absent_language(source: str) -> str | None:
    """The package of a kernel language the file imports and this host lacks (the serve started here runs this
    interpreter): the judge refuses such a file as a language it cannot run, whatever its header declares. A raw
    completion (.md) or a file that does not parse is read line by line for its import statements."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        tops = set(re.findall(r"^\s*(?:from|import)\s+([A-Za-z_]\w*)", source, re.M))
    else:
        tops = set()
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                tops.update(alias.name.split(".")[0] for alias in node.names)
            elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                tops.add(node.module.split(".")[0])
    return next((language.module for language in languages.LANGUAGES if language.module in tops
                 and not languages.installed(language.module)), None)


def candidates(dirs: list[Path], count: int, include: list[str], exclude: list[str], same_copies: bool
               ) -> list[dict]:
    files = [p for d in dirs for p in sorted(d.iterdir()) if p.is_file() and p.suffix in (".py", ".md")
             and any(fnmatch.fnmatch(p.name, pat) for pat in include)
             and not any(fnmatch.fnmatch(p.name, pat) for pat in exclude) and {"expect", "task"} <= set(declared(p))]
    if not files:
        raise SystemExit(f"no corpus file with `task:` and `expect:` in {', '.join(map(str, dirs))}")
    out = []
    for i in range(count):
        path, copy = files[i % len(files)], i // len(files)
        source = path.read_text(encoding="utf-8")
        if copy and not same_copies:
            source += f"\n# burst copy {copy}\n"
        meta = declared(path)
        absent = absent_language(source)
        out.append({"file": str(path.relative_to(ROOT)) if path.is_relative_to(ROOT) else str(path), "copy": copy,
                    "task": meta["task"], "expect": "compile_error" if absent else meta["expect"],
                    "declared": meta["expect"], "absent_language": absent, "source": source})
    return out


# --- the service ----------------------------------------------------------------------------------------------

def start_serve(work: Path, out: Path, port: int, device: str, compile_workers: int | None) -> subprocess.Popen:
    """`kernel-judge serve` with a fresh data directory and fresh caches under `work` (never the host's)."""
    env = {k: v for k, v in os.environ.items() if k != "DATABASE_URL"}
    env.update(JUDGE_DATA_DIR=str(work / "data"), JUDGE_BUILD_ROOT=str(work / "builds"),
               JUDGE_CACHE_ROOT=str(work / "cache"), JUDGE_ADMIN_KEY=ADMIN)
    if device == "cpu":
        env["JUDGE_DEVICES"] = "cpu"
    if compile_workers is not None:
        env["JUDGE_COMPILE_WORKERS"] = str(compile_workers)
    log = open(out / "serve.log", "wb")
    return subprocess.Popen([sys.executable, "-m", "service.cli.main", "serve", "--port", str(port)], env=env,
                            stdout=log, stderr=subprocess.STDOUT, start_new_session=True)


async def post_all(base: str, key: str, cands: list[dict]) -> list[str]:
    """POST every candidate at once: all requests are created and sent before any answer is awaited."""
    limits = httpx.Limits(max_connections=len(cands), max_keepalive_connections=len(cands))
    async with httpx.AsyncClient(base_url=base, timeout=120, limits=limits,
                                 headers={"Authorization": f"Bearer {key}"}) as client:
        async def post(c: dict) -> str:
            r = await client.post("/v1/submissions", json={"task": c["task"], "source": c["source"],
                                                           "model": "burst", "tags": ["burst"]})
            if r.status_code == 422 and c.get("absent_language"):  # no worker here can judge its language
                return REFUSED + r.text
            r.raise_for_status()
            return r.json()["id"]

        return list(await asyncio.gather(*(post(c) for c in cands)))


REFUSED = "refused at submission: "
"""What `post_all` returns for a candidate the service refused at once (422: no worker can judge its language)."""


def follow(client: httpx.Client, ids: list[str], server: subprocess.Popen, timeout: float) -> dict[str, dict]:
    """Every submission as the API returns it, until all are done or `timeout` passes (then the rest as they are);
    a candidate refused at submission as a done one whose verdict is that refusal."""
    done: dict[str, dict] = {sub: {"id": None, "status": "done", "attempts": 0,
                                   "verdict": {"status": "refused", "diagnosis": sub[len(REFUSED):]}}
                             for sub in ids if sub.startswith(REFUSED)}
    deadline = time.monotonic() + timeout
    while len(done) < len(ids) and time.monotonic() < deadline and server.poll() is None:
        for sub in ids:
            if sub not in done and (got := client.get(f"/v1/submissions/{sub}").json())["status"] == "done":
                done[sub] = got
        time.sleep(0.5)
    return {sub: done.get(sub) or client.get(f"/v1/submissions/{sub}").json() for sub in ids}


def stop(server: subprocess.Popen) -> None:
    if server.poll() is None:
        server.terminate()  # SIGTERM: serve stops its worker too
        try:
            server.wait(90)
        except subprocess.TimeoutExpired:
            os.killpg(server.pid, 9)
            server.wait(30)


# --- the report -----------------------------------------------------------------------------------------------

def _time(value: str | None) -> dt.datetime | None:
    """An API timestamp as the holds' naive UTC."""
    if not value:
        return None
    t = dt.datetime.fromisoformat(value)
    return t.astimezone(dt.timezone.utc).replace(tzinfo=None) if t.tzinfo else t


def holds_account(db_url: str, rows: list[dict], start: dt.datetime, end: dt.datetime) -> dict:
    """Busy fractions and holds per candidate, from the claims' device stamps (service.observability.timeline)."""
    db = Database(db_url)
    with db.transaction(read_only=True) as session:
        holds = timeline.load_holds(session)
        unplaced = timeline.executed_without_hold(session)
    db.dispose()
    stage = timeline.span(holds)
    longest: dict[str, float] = {}
    for h in holds:
        longest[h.submission_id] = max(longest.get(h.submission_id, 0.0), h.seconds)
    for row in rows:
        row["longest_hold_s"] = longest.get(row["id"])
    honest = [r["longest_hold_s"] for r in rows if r["expect"] == "correct" and r["status"] == "correct"
              and r["longest_hold_s"] is not None]
    bound = max(honest) if honest else None
    busy = timeline.busy_seconds(holds, start, end)
    return {
        "summary": timeline.summary(holds), "svg": timeline.render_svg(holds, title="device holds: burst"),
        "busy_s": busy, "busy_fraction_burst": timeline.busy_fraction(holds, start, end),
        "busy_fraction_stage": timeline.busy_fraction(holds, *stage) if stage else {},
        "device_s_per_candidate": sum(busy.values()) / len(rows) if rows else None,
        "slowest_honest_hold_s": bound, "holds_total": len(holds), "unplaced": unplaced,
        "overlaps": len(timeline.overlaps(holds)),
        "over_honest": [{"file": r["file"], "copy": r.get("copy"), "status": r["status"], "hold_s": r["longest_hold_s"]}
                        for r in rows if bound is not None and (r["longest_hold_s"] or 0) > bound],
    }


def refused_for(module: str, diagnosis: str) -> bool:
    """Whether a refusal at submission names the missing language: by its package (`cutlass`) or by the id the
    service's 422 lists under `missing` (`cute`)."""
    ids = {language.id for language in languages.LANGUAGES if language.module == module}
    return module in diagnosis or any(f"'{i}'" in diagnosis or f'"{i}"' in diagnosis for i in ids)


def row_of(cand: dict, sub: dict) -> dict:
    verdict = sub.get("verdict") or {}
    status = verdict.get("status") or sub.get("stage")
    cost = (verdict.get("details") or {}).get("cost") or {}
    diagnosis = verdict.get("diagnosis") or ""
    as_expected = sub["status"] == "done" and bool(re.fullmatch(cand["expect"], status or ""))
    if cand.get("absent_language"):  # refused for the missing language (at submission, or by the judge), not for
        # anything else in the file
        as_expected = sub["status"] == "done" and (f"{cand['absent_language']!r} is not installed here" in diagnosis
                                                   if status != "refused" else refused_for(cand["absent_language"],
                                                                                           diagnosis))
    return {"id": sub["id"], "file": cand["file"], "copy": cand["copy"], "task": cand["task"],
            "expect": cand["expect"], "declared": cand.get("declared", cand["expect"]),
            "absent_language": cand.get("absent_language"), "status": status, "done": sub["status"] == "done",
            "as_expected": as_expected,
            "attempts": sub.get("attempts"), "finished_at": (sub.get("timestamps") or {}).get("finished_at"),
            "held_s_verdict": cost.get("device_held_s"), "diagnosis": diagnosis[:600],
            "rule": (verdict.get("details") or {}).get("rule"), "bound_inputs": bound_inputs(verdict)}


BOUND_INPUTS = ("claims_ms", "windows_ms", "runs_ms", "empty_call_run_ms", "empty_call_window_ms", "call_floor_ms")
"""What the CPU-time and wall bounds read (sandbox/execution/plausibility.py), kept for a refused candidate so that a
refusal of an honest kernel can be replayed against the rule (tests/fixtures/timing/)."""


def bound_inputs(verdict: dict) -> dict | None:
    timing = (verdict.get("details") or {}).get("timing") or {}
    if verdict.get("status") != "tamper_detected" or not timing:
        return None
    return {k: timing[k] for k in BOUND_INPUTS if k in timing}


def markdown(report: dict) -> str:
    h = report["holds"]
    lines = [f"# Burst on a fresh `kernel-judge serve` ({report['device']}, {report['count']} candidates, "
             f"{report['distinct_files']} files)", "",
             f"- time from the burst to the last verdict: **{report['last_verdict_s']:.1f} s** "
             f"({report['done']} of {report['count']} done)",
             f"- verdicts as declared: **{report['as_expected']} of {report['count']}**"
             + (f" ({absent} of them files in a kernel language this host lacks, expected to be refused as such)"
                if (absent := sum(bool(r.get("absent_language")) for r in report["candidates"])) else ""),
             "- busy fraction over the burst: "
             + ", ".join(f"{k} {v:.0%}" for k, v in h["busy_fraction_burst"].items()),
             "- busy fraction over the device stage: "
             + ", ".join(f"{k} {v:.0%}" for k, v in h["busy_fraction_stage"].items()),
             f"- device seconds per candidate: {h['device_s_per_candidate'] or 0:.2f}",
             f"- slowest honest hold: {h['slowest_honest_hold_s'] or 0:.2f} s; holds longer: {len(h['over_honest'])}",
             f"- overlaps (a device running two jobs at once): {h['overlaps']}; executed claims without a hold: "
             f"{h['unplaced']}", "",
             "| file | copy | expected | verdict | ok | attempts | longest hold s |", "|---|---|---|---|---|---|---|"]
    for r in report["candidates"]:
        hold = "-" if r["longest_hold_s"] is None else f"{r['longest_hold_s']:.2f}"
        expected = r["expect"] if not r.get("absent_language") else \
            f"{r['expect']} ({r['absent_language']} not installed; declares {r['declared']})"
        lines.append(f"| {r['file']} | {r['copy']} | {expected} | {r['status']} | "
                     f"{'yes' if r['as_expected'] else '**NO**'} | {r['attempts']} | {hold} |")
    lines += ["", "```", h["summary"], "```", ""]
    return "\n".join(lines)


# --- main -----------------------------------------------------------------------------------------------------

def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", choices=["cuda", "cpu"], default="cuda",
                        help="cuda: every visible GPU (JUDGE_DEVICES=auto) and the CUDA corpus; cpu: the CPU corpus")
    parser.add_argument("--count", type=int, default=64, help="candidates in the burst")
    parser.add_argument("--out", type=Path, default=Path("results/burst"))
    parser.add_argument("--work", type=Path, default=None,
                        help="where the fresh data directory and caches go (default: a new temporary directory)")
    parser.add_argument("--port", type=int, default=8766)
    parser.add_argument("--compile-workers", type=int, default=None, help="JUDGE_COMPILE_WORKERS (default: serve's)")
    parser.add_argument("--corpus", type=Path, nargs="*", default=None, help="corpus directories (default: by device)")
    parser.add_argument("--include", nargs="*", default=["*"], help="file name patterns to take (default: all)")
    parser.add_argument("--exclude", nargs="*", default=[], help="file name patterns to leave out")
    parser.add_argument("--same-copies", action="store_true", help="repeat files unchanged (one build per file)")
    parser.add_argument("--timeout", type=float, default=3600.0, help="seconds to wait for the last verdict")
    args = parser.parse_args()

    dirs = args.corpus or [ROOT / d for d in CORPUS[args.device]]
    cands = candidates(dirs, args.count, args.include, args.exclude, args.same_copies)
    args.out.mkdir(parents=True, exist_ok=True)
    work = args.work or Path(tempfile.mkdtemp(prefix="kj-burst-"))
    work.mkdir(parents=True, exist_ok=True)
    base = f"http://127.0.0.1:{args.port}"
    server = start_serve(work, args.out, args.port, args.device, args.compile_workers)
    try:
        with JudgeClient(base, key="") as judge:
            try:
                judge.wait_ready(300, alive=lambda: server.poll() is None)
            except JudgeError as exc:
                raise SystemExit(f"the service did not become ready ({exc}); see serve.log") from None
        with httpx.Client(base_url=base, timeout=30) as client:
            key = client.post("/v1/keys", json={"submitter": "burst"},
                              headers={"Authorization": f"Bearer {ADMIN}"}).json()["key"]
            client.headers["Authorization"] = f"Bearer {key}"  # its own submissions' diagnostics are private to it
            burst_at, burst_utc = time.monotonic(), dt.datetime.now(dt.timezone.utc).replace(tzinfo=None)
            posted = asyncio.run(post_all(base, key, cands))
            subs = follow(client, posted, server, args.timeout)
            waited = time.monotonic() - burst_at
    finally:
        stop(server)
    rows = [row_of(c, subs[sub]) for c, sub in zip(cands, posted)]
    finished = [t for r in rows if (t := _time(r["finished_at"]))]
    end = max(finished) if finished else burst_utc + dt.timedelta(seconds=waited)
    report = {"device": args.device, "count": len(rows), "distinct_files": len({r["file"] for r in rows}),
              "done": sum(r["done"] for r in rows), "as_expected": sum(r["as_expected"] for r in rows),
              "last_verdict_s": (end - burst_utc).total_seconds(), "work": str(work),
              "holds": holds_account(f"sqlite:///{(work / 'data' / 'judge.db').resolve()}", rows, burst_utc, end),
              "candidates": rows}
    (args.out / "timeline.svg").write_text(report["holds"].pop("svg"))
    (args.out / "burst.json").write_text(json.dumps(report, indent=1, default=str))
    text = markdown(report)
    (args.out / "burst.md").write_text(text)
    print(text)
    if report["done"] < report["count"]:
        tail = (args.out / "serve.log").read_text(errors="replace")[-4000:]
        print(f"{report['count'] - report['done']} without a verdict after {args.timeout:.0f} s; "
              f"serve.log tail:\n{tail}")
    return 0 if report["as_expected"] == report["count"] else 1


if __name__ == "__main__":
    sys.exit(main())
