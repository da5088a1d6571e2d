"""End to end on a GPU machine: start the service as the README does, submit the fast kernels, time it.

    source scripts/device_env.sh && python3 scripts/gpu_service_e2e.py --out results/

Starts `kernel-judge serve` (API + embedded worker on every local GPU, SQLite) in a subprocess, mints a
key, submits each candidate over HTTP, follows it until `done`, and reports the wall time from POST to
verdict split into queue wait, compile (sandbox.prepare) and GPU (sandbox.execute) from the stored stage
timestamps, with the device-held seconds and the wait for a pre-started child from the verdict's cost. Writes
service_e2e.md (the table) and service_e2e.json (every submission as the API returned it) to --out.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[1]
CANDIDATES = [("kl_div", "tests/corpus/cuda/kl_div_fast.py"),
              ("cross_entropy", "tests/corpus/cuda/cross_entropy_fast.py")]


def _num(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"


def ts(value: str | None) -> dt.datetime | None:
    return dt.datetime.fromisoformat(value) if value else None


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", type=Path, default=ROOT / "results")
    parser.add_argument("--port", type=int, default=8765)
    parser.add_argument("--candidates", nargs="*", default=[f"{t}:{p}" for t, p in CANDIDATES],
                        help="task:path pairs (default: the fast CUDA kernels)")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    data = Path("/tmp/judge-e2e")
    env = {**os.environ, "JUDGE_ADMIN_KEY": "e2e-admin", "JUDGE_DATA_DIR": str(data)}
    log = open(args.out / "service_e2e.log", "w")
    server = subprocess.Popen([sys.executable, "-m", "service.cli.main", "serve", "--port", str(args.port)],
                              cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT)
    base = f"http://127.0.0.1:{args.port}"
    rows: list[str] = []
    verdicts: list[dict] = []
    try:
        with httpx.Client(base_url=base, timeout=30) as client:
            deadline = time.monotonic() + 120
            while True:
                try:
                    if client.get("/readyz").status_code == 200:
                        break
                except httpx.TransportError:
                    pass
                if time.monotonic() > deadline or server.poll() is not None:
                    raise SystemExit("the service did not become ready; see service_e2e.log")
                time.sleep(0.5)
            key = client.post("/v1/keys", json={"submitter": "e2e"},
                              headers={"Authorization": "Bearer e2e-admin"}).json()["key"]
            auth = {"Authorization": f"Bearer {key}"}
            for task, path in (c.split(":", 1) for c in args.candidates):
                t_post = time.monotonic()
                posted = client.post("/v1/submissions", json={"task": task, "source": (ROOT / path).read_text(),
                                                               "model": "e2e"}, headers=auth)
                post_ms = (time.monotonic() - t_post) * 1e3
                sub_id = posted.json()["id"]
                while True:
                    sub = client.get(f"/v1/submissions/{sub_id}").json()
                    if sub["status"] == "done":
                        break
                    time.sleep(0.2)
                wall = time.monotonic() - t_post
                t = {k: ts(v) for k, v in sub["timestamps"].items()}
                queue = (t["compile_started_at"] - t["queued_at"]).total_seconds()
                compile_s = (t["compiled_at"] - t["compile_started_at"]).total_seconds()
                wait = (t["run_started_at"] - t["compiled_at"]).total_seconds()
                gpu = (t["finished_at"] - t["run_started_at"]).total_seconds()
                v = sub["verdict"]
                perf = v.get("performance") or {}
                median = perf.get("candidate", {}).get("median_ms")
                stages = v.get("stages", {})
                cost = (v.get("details") or {}).get("cost") or {}
                spare = cost.get("pre_started") or {}
                timing = (v.get("details") or {}).get("timing") or {}
                verdicts.append({"task": task, "candidate": path, "post_to_verdict_s": wall, "submission": sub})
                rows.append(f"| {task} | {Path(path).name} | {posted.status_code} | {post_ms:.0f} | {v['status']} | "
                            f"{median if median is None else f'{median:.4f}'} | {wall:.1f} | {queue:.1f} | "
                            f"{compile_s:.1f} | {wait:.1f} | {gpu:.1f} | {stages.get('baselines', 0):.1f} | "
                            f"{stages.get('timing', 0):.1f} | {_num(cost.get('device_held_s'))} | "
                            f"{_num(spare.get('acquire_wait_s'))} | {timing.get('timed_calls', '-')} |")
                print(rows[-1], flush=True)
            board = client.get("/v1/leaderboard/kl_div").json()
    finally:
        server.terminate()
        try:
            server.wait(timeout=60)
        except subprocess.TimeoutExpired:
            server.kill()
    text = ["| task | candidate | POST status | POST ms | verdict | median ms | POST to verdict s | queue s | "
            "compile s | wait for GPU s | GPU s | of which baselines s | of which timing s | device held s | "
            "waited for a spare s | timed calls |",
            "|" + "---|" * 16, *rows, "", f"leaderboard kl_div: {board}"]
    (args.out / "service_e2e.md").write_text("\n".join(text) + "\n")
    # Every submission as the API returned it, verdict included: what explains a slow one.
    (args.out / "service_e2e.json").write_text(json.dumps(verdicts, indent=1))
    print("\n".join(text))
    return 0


if __name__ == "__main__":
    sys.exit(main())
