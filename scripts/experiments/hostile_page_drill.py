"""Issue 41's drill with real processes: how long ordinary POSTs take while views of a 256 KB hostile public source
render, against the same POSTs with no view in flight, and what each view costs the server's CPU.

It starts a uvicorn API process on a fresh SQLite database (migrated, one key minted with `kernel-judge keys create`,
no worker), stores the two hostile texts of issue 41 as public submissions, then for each: VIEWS page views in
threads while the main thread sends POSTS submissions one after another. Prints one JSON line per scenario: the POSTs'
p50 and p90 in seconds, the views' wall seconds, and the server's CPU over the scenario (/proc/PID/stat, all threads).

    python -m scripts.experiments.hostile_page_drill --views 6 --posts 40
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import httpx

from service.client import JudgeClient

SIZE = 256 * 1024
HOSTILE = {"link-in-fences": "```\n[a](", "unclosed-fences": "```python\nx = 1\n"}
HONEST = Path(__file__).resolve().parents[2] / "tests" / "corpus" / "cpu" / "kl_div_cpp_correct.py"


def _cpu_s(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as stat:
        fields = stat.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _posts(http: httpx.Client, auth: dict[str, str], count: int, tag: str) -> list[float]:
    honest, took = HONEST.read_text(), []
    for i in range(count):
        start = time.perf_counter()
        answer = http.post("/v1/submissions", json={"task": "kl_div", "source": f"{honest}\n# {tag} {i}\n"},
                           headers=auth)
        took.append(time.perf_counter() - start)
        assert answer.status_code == 202, answer.text
    return took


def scenario(base: str, pid: int, auth: dict[str, str], name: str, page_id: str | None, views: int,
             posts: int) -> dict:
    walls: list[float] = []

    def view() -> None:
        start = time.perf_counter()
        with httpx.Client(base_url=base, timeout=600) as viewer:
            assert viewer.get(f"/submissions/{page_id}").status_code == 200
        walls.append(time.perf_counter() - start)

    threads = [threading.Thread(target=view) for _ in range(views if page_id else 0)]
    before = _cpu_s(pid)
    for thread in threads:
        thread.start()
    with httpx.Client(base_url=base, timeout=600) as http:
        took = _posts(http, auth, posts, name)
    for thread in threads:
        thread.join()
    took.sort()
    return {"scenario": name, "views": len(threads), "posts": posts, "post_p50_s": round(statistics.median(took), 4),
            "post_p90_s": round(took[int(0.9 * (len(took) - 1))], 4),
            "view_wall_s": [round(w, 2) for w in sorted(walls)], "server_cpu_s": round(_cpu_s(pid) - before, 2)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--views", type=int, default=6)
    parser.add_argument("--posts", type=int, default=40)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        env = {**os.environ, "DATABASE_URL": f"sqlite:///{tmp}/judge.db", "JUDGE_DATA_DIR": tmp,
               "JUDGE_DEVICES": "cpu", "JUDGE_LOG_LEVEL": "WARNING"}
        cli = [sys.executable, "-m", "service.cli.main"]
        subprocess.run([*cli, "migrate"], env=env, check=True, capture_output=True)
        key = subprocess.run([*cli, "keys", "create", "mallory"], env=env, check=True, capture_output=True,
                             text=True).stdout.strip()
        port = _port()
        api = subprocess.Popen([sys.executable, "-m", "uvicorn", "service.main:create_app", "--factory", "--host",
                                "127.0.0.1", "--port", str(port)], env=env, stdout=subprocess.DEVNULL,
                               stderr=subprocess.DEVNULL)
        base, auth = f"http://127.0.0.1:{port}", {"Authorization": f"Bearer {key}"}
        try:
            with JudgeClient(base, key="") as judge:
                judge.wait_ready(60, alive=lambda: api.poll() is None)
            print(json.dumps(scenario(base, api.pid, auth, "no view", None, 0, args.posts)), flush=True)
            with httpx.Client(base_url=base, timeout=60) as http:
                for name, unit in HOSTILE.items():
                    text = "<script>alert(1)</script>\n" + (unit * (SIZE // len(unit) + 1))[:SIZE - 26]
                    sent = http.post("/v1/submissions", json={"task": "kl_div", "source": text, "public": True},
                                     headers=auth)
                    result = scenario(base, api.pid, auth, name, sent.json()["id"], args.views, args.posts)
                    print(json.dumps(result), flush=True)
        finally:
            api.terminate()
            api.wait(60)


if __name__ == "__main__":
    main()
