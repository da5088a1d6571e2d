"""The real API process (uvicorn) with real workers: restart with nothing lost, server-sent events, the CLI."""

from __future__ import annotations

import json
import re
import subprocess
import sys

import httpx

from service import crud
from service.db.session import Database

from tests.service.conftest import CORRECT_KL_DIV, ROOT, wait_for

SOURCE = CORRECT_KL_DIV.read_text()


def test_api_restart_loses_nothing(db: Database, live_api, spawn):
    with db.transaction() as session:
        key = crud.create_key(session, "alice")[1]
    headers = {"Authorization": f"Bearer {key}"}
    api, base = live_api()
    ids = []
    for i in range(5):
        r = httpx.post(f"{base}/v1/submissions", headers=headers,
                       json={"task": "kl_div", "source": SOURCE, "idempotency_key": f"k{i}", "sample_index": i})
        assert r.status_code == 202, r.text
        ids.append(r.json()["id"])
    api.kill9()  # no graceful shutdown: what was acknowledged must already be on disk

    api, base = live_api()
    for i, sub_id in enumerate(ids):
        view = httpx.get(f"{base}/v1/submissions/{sub_id}").json()
        assert view["status"] == "queued" and view["position"] == i and view["sample_index"] == i
    replay = httpx.post(f"{base}/v1/submissions", headers=headers,
                        json={"task": "kl_div", "source": SOURCE, "idempotency_key": "k3"})
    assert replay.json()["id"] == ids[3] and replay.json()["duplicate"] is True

    spawn("worker", JUDGE_MODE="compile-only")
    wait_for(lambda: all(httpx.get(f"{base}/v1/submissions/{i}").json()["status"] == "done" for i in ids),
             240, "the five submissions to be judged")
    api.terminate()


def test_events_stream_status_changes_until_done(db: Database, live_api, spawn):
    with db.transaction() as session:
        key = crud.create_key(session, "alice")[1]
    _, base = live_api()
    sub_id = httpx.post(f"{base}/v1/submissions", headers={"Authorization": f"Bearer {key}"},
                        json={"task": "kl_div", "source": SOURCE}).json()["id"]
    seen = []
    with httpx.stream("GET", f"{base}/v1/submissions/{sub_id}/events", timeout=300) as stream:
        assert stream.headers["content-type"].startswith("text/event-stream")
        event = None
        for line in stream.iter_lines():
            if line.startswith("event: "):
                event = line[7:]
            elif line.startswith("data: "):
                assert event == "status"
                seen.append(json.loads(line[6:]))
                if len(seen) == 1:
                    spawn("worker")  # the stream is open and has said "queued": now let a worker judge it
    stages = [v["stage"] for v in seen]
    assert stages[0] == "queued" and stages[-1] == "done"
    assert "running" in stages and stages.index("running") < stages.index("done")
    assert seen[-1]["verdict"]["status"] == "correct"
    assert httpx.get(f"{base}/v1/submissions/nope/events").status_code == 404


def test_cli_submit_wait_and_status(db: Database, live_api, spawn, tmp_path):
    with db.transaction() as session:
        key = crud.create_key(session, "carol")[1]
    _, base = live_api()
    spawn("worker", JUDGE_MODE="compile-only")
    cli = [sys.executable, "-m", "service.cli.main"]
    done = subprocess.run([*cli, "submit", "--task", "kl_div", str(CORRECT_KL_DIV), "--wait", "--url", base,
                           "--key", key, "--model", "m", "--public"], capture_output=True, text=True, cwd=ROOT,
                          timeout=300)
    assert done.returncode == 0, done.stderr
    sub_id, verdict_line = done.stdout.strip().splitlines()
    assert verdict_line.startswith("correct: compile-only judge")
    # While waiting, stderr says each stage with the seconds since submitting, ending at "done".
    stages = re.findall(r"^\s*(\d+\.\d) s  (\w+)", done.stderr, re.M)
    assert stages and stages[-1][1] == "done", done.stderr
    assert [float(t) for t, _ in stages] == sorted(float(t) for t, _ in stages), done.stderr
    # The status is printed once: one `status: diagnosis` line on stdout, and stderr's stage lines neither repeat
    # the last stage nor the verdict.
    assert done.stdout.count("correct: ") == 1 and "correct" not in done.stderr, (done.stdout, done.stderr)
    assert [s for _, s in stages].count("done") == 1, done.stderr
    status = subprocess.run([*cli, "status", sub_id, "--json", "--url", base], capture_output=True, text=True, cwd=ROOT,
                            timeout=60)
    assert json.loads(status.stdout)["submitter"] == "carol"
    assert httpx.get(f"{base}/v1/submissions/{sub_id}/source").status_code == 200  # --public: readable without a key
    unknown = subprocess.run([*cli, "submit", "--task", "nope", str(CORRECT_KL_DIV), "--url", base, "--key", key],
                             capture_output=True, text=True, cwd=ROOT, timeout=60)
    assert unknown.returncode == 5 and "valid_task_ids" in unknown.stderr  # 5: not found (exit codes in --help)


def test_serve_runs_api_and_worker_and_stops_both(tmp_path, judge_dirs):
    """The README's `kernel-judge serve` on the embedded default: SQLite under the data dir, one worker
    next to the API; it judges a submission, and SIGTERM stops the API and its worker alike."""
    import os
    import signal
    from pathlib import Path

    from tests.service.conftest import ADMIN_KEY, Proc, free_port, wait_api

    port = free_port()
    env = {k: v for k, v in os.environ.items() if k != "DATABASE_URL"}
    env.update(judge_dirs, JUDGE_DATA_DIR=str(tmp_path / "data"), JUDGE_ADMIN_KEY=ADMIN_KEY, JUDGE_DEVICES="cpu",
               JUDGE_MODE="compile-only", JUDGE_POLL_S="0.05", JUDGE_SHUTDOWN_GRACE_S="20")
    serve = Proc([sys.executable, "-m", "service.cli.main", "serve", "--port", str(port)], env, tmp_path / "serve.log")
    base = f"http://127.0.0.1:{port}"
    try:
        wait_api(serve, base, 120)
        assert (tmp_path / "data" / "judge.db").exists()
        key = httpx.post(f"{base}/v1/keys", json={"submitter": "bob"},
                         headers={"Authorization": f"Bearer {ADMIN_KEY}"}).json()["key"]
        # Ready means its worker has said what it can judge: a CUDA candidate sent at once is refused, not queued
        # for a worker that will never claim it (a burst sent right after /readyz once left such jobs queued).
        cuda = (Path(__file__).parents[1] / "corpus" / "cuda" / "kl_div_fast.py").read_text()
        refused = httpx.post(f"{base}/v1/submissions", headers={"Authorization": f"Bearer {key}"},
                             json={"task": "kl_div", "source": cuda})
        assert refused.status_code == 422 and "gpu" in refused.text.lower(), refused.text
        sub = httpx.post(f"{base}/v1/submissions", headers={"Authorization": f"Bearer {key}"},
                         json={"task": "kl_div", "source": SOURCE}).json()
        wait_for(lambda: httpx.get(f"{base}/v1/submissions/{sub['id']}").json()["status"] == "done", 240,
                 "the embedded worker to judge the submission")

        children = Path(f"/proc/{serve.pid}/task/{serve.pid}/children").read_text().split()
        assert len(children) == 1, children
        worker = int(children[0])
        assert "worker" in Path(f"/proc/{worker}/cmdline").read_text()
        serve.popen.send_signal(signal.SIGTERM)
        assert serve.popen.wait(60) != -signal.SIGKILL

        def gone() -> bool:
            return not Path(f"/proc/{worker}").exists() or "Z" in Path(f"/proc/{worker}/stat").read_text().split()[2]

        wait_for(gone, 30, "the worker to stop with serve")
    finally:
        serve.close()
