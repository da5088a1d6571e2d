"""A batch of CUDA candidates through the CLI on a GPU machine: throughput, GPU busy fraction, summary table.

    source scripts/gpu/device_env.sh && python3 scripts/bench/gpu_batch.py --out results/

Builds a JSONL of at least 60 samples from tests/corpus/cuda (every honest and broken kernel, variations of
the honest ones with another block size, and duplicates sent as raw LLM completions whose final ```python
block repeats an earlier sample: judged once, verdict shared), starts `kernel-judge serve` (API + embedded
worker on every local GPU, SQLite), mints a key, and runs `kernel-judge batch FILE --watch` while sampling
`nvidia-smi` every 200 ms. Then `kernel-judge results -o` writes the CSV. Writes gpu_batch.md (for
docs/benchmarks.md), gpu_batch.jsonl, gpu_batch_results.csv, gpu_batch_util.csv, gpu_batch_util.svg (the GPU-busy
timeline, scripts/bench/plot_gpu_util.py) and the logs to --out.

Numbers reported:
- throughput: samples (lines) per hour and distinct candidates per hour, from upload to the batch's end;
- GPU busy fraction: share of nvidia-smi samples with utilization.gpu > 0 during the batch, and the mean
  utilization; beside it the device-held fraction from the stored stage timestamps (sum over judged jobs of
  finished_at - run_started_at, divided by the batch's wall time), i.e. how much of the time a GPU was given a
  candidate at all (compilation runs on the CPU pool meanwhile).
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import re
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import httpx
from typing_extensions import Self

from service.client import JudgeClient, JudgeError

ROOT = Path(__file__).resolve().parents[2]
CORPUS = ROOT / "tests" / "corpus" / "cuda"
CLI = [sys.executable, "-m", "service.cli.main"]

# Honest kernels whose block size is one constant: each other size is a real variant (its own build and time).
VARIANTS = {"kl_div_fast.py": (1024, 512, 256), "kl_div_fused.py": (512, 256, 1024),
            "cross_entropy_online.py": (256, 128, 512)}
THREADS = re.compile(r"constexpr int THREADS = \d+;")


def meta(path: Path) -> tuple[str, str]:
    text = path.read_text()
    return re.search(r"^task:\s*(\S+)", text, re.MULTILINE)[1], re.search(r"^expect:\s*(\S+)", text, re.MULTILINE)[1]


def samples(min_lines: int) -> tuple[list[dict], int]:
    """Distinct candidates first (corpus, then variants), then duplicates as completions until min_lines;
    returns the lines and how many distinct candidates they hold."""
    distinct = []
    for path in sorted(CORPUS.glob("*.py")):
        task, expect = meta(path)
        distinct.append({"task": task, "source": path.read_text(), "model": "corpus",
                         "metadata": {"file": path.name, "expect": expect}})
        for threads in VARIANTS.get(path.name, ())[1:]:
            code = THREADS.sub(f"constexpr int THREADS = {threads};", path.read_text(), count=1)
            distinct.append({"task": task, "source": code, "model": "variants",
                             "metadata": {"file": path.name, "threads": threads, "expect": expect}})
    lines = list(distinct)
    i = 0
    while len(lines) < max(min_lines, 2 * len(distinct)):
        original = distinct[i % len(distinct)]
        lines.append({"task": original["task"], "model": "completions",
                      "completion": f"Attempt {i}. Reasoning about coalescing...\n```python\n{original['source']}```\n",
                      "metadata": {**original["metadata"], "duplicate": True}})
        i += 1
    for index, line in enumerate(lines):
        line["sample_index"] = index
    return lines, len(distinct)


class UtilSampler:
    """nvidia-smi utilization.gpu of every GPU, every 200 ms, in a background thread."""

    def __init__(self, out: Path) -> None:
        self.out = out
        self.rows: list[tuple[float, int, float]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                query = ["nvidia-smi", "--query-gpu=index,utilization.gpu", "--format=csv,noheader,nounits"]
                text = subprocess.run(query, check=False, capture_output=True, text=True, timeout=5).stdout
                now = time.time()
                for line in text.strip().splitlines():
                    gpu, util = (part.strip() for part in line.split(","))
                    self.rows.append((now, int(gpu), float(util)))
            except (OSError, ValueError, subprocess.TimeoutExpired):
                pass
            self._stop.wait(0.2)

    def __enter__(self) -> Self:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(10)
        self.out.write_text("time,gpu,utilization\n" + "".join(f"{t:.3f},{g},{u}\n" for t, g, u in self.rows))

    def busy(self) -> tuple[float | None, float | None]:
        if not self.rows:
            return None, None
        return (sum(u > 0 for _, _, u in self.rows) / len(self.rows), sum(u for _, _, u in self.rows) / len(self.rows))


def wait_ready(base: str, server: subprocess.Popen, timeout: float = 180) -> None:
    with JudgeClient(base, key="") as judge:
        try:
            judge.wait_ready(timeout, alive=lambda: server.poll() is None)
        except JudgeError as exc:
            raise SystemExit(f"the service did not become ready ({exc}); see gpu_batch_serve.log") from None


def device_held_s(base: str, rows: list[dict]) -> float:
    """Seconds a GPU held a candidate, summed over the judged (non-duplicate) submissions."""
    total = 0.0
    for row in rows:
        if row.get("duplicate_of"):
            continue
        stamps = httpx.get(f"{base}/v1/submissions/{row['submission_id']}", timeout=30).json()["timestamps"]
        if stamps.get("run_started_at") and stamps.get("finished_at"):
            total += (dt.datetime.fromisoformat(stamps["finished_at"])
                      - dt.datetime.fromisoformat(stamps["run_started_at"])).total_seconds()
    return total


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, default=ROOT / "results")
    parser.add_argument("--port", type=int, default=8766)
    parser.add_argument("--lines", type=int, default=60, help="at least this many samples (default 60)")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    lines, distinct = samples(args.lines)
    upload = args.out / "gpu_batch.jsonl"
    upload.write_text("".join(json.dumps(s) + "\n" for s in lines))

    data = Path(tempfile.mkdtemp(prefix="judge-gpu-batch-"))
    env = {**os.environ, "JUDGE_ADMIN_KEY": "gpu-batch-admin", "JUDGE_DATA_DIR": str(data), "COLUMNS": "140"}
    env.pop("DATABASE_URL", None)
    base = f"http://127.0.0.1:{args.port}"
    with open(args.out / "gpu_batch_serve.log", "w") as log:
        server = subprocess.Popen([*CLI, "serve", "--port", str(args.port)], cwd=ROOT, env=env, stdout=log,
                                  stderr=subprocess.STDOUT)
    try:
        wait_ready(base, server)
        key = httpx.post(f"{base}/v1/keys", json={"submitter": "gpu-batch"},
                         headers={"Authorization": "Bearer gpu-batch-admin"}, timeout=30).json()["key"]
        client_env = {**env, "JUDGE_URL": base, "JUDGE_API_KEY": key}
        with UtilSampler(args.out / "gpu_batch_util.csv") as sampler:
            t0 = time.monotonic()
            done = subprocess.run([*CLI, "batch", str(upload), "--watch", "--name", "gpu-batch", "--poll", "2"],
                                  check=False, cwd=ROOT, env=client_env, capture_output=True, text=True)
            wall = time.monotonic() - t0
        (args.out / "gpu_batch_cli.log").write_text(done.stdout + "\n--- stderr ---\n" + done.stderr)
        if done.returncode != 0:
            print(done.stderr, file=sys.stderr)
            return done.returncode
        batch_id, table = done.stdout.split("\n", 1)
        results = args.out / "gpu_batch_results.csv"
        subprocess.run([*CLI, "results", batch_id.strip(), "-o", str(results)], cwd=ROOT, env=client_env, check=True)
        jsonl = subprocess.run([*CLI, "results", batch_id.strip()], cwd=ROOT, env=client_env, check=True,
                               capture_output=True, text=True).stdout
        rows = [json.loads(line) for line in jsonl.splitlines() if line.strip()]
        held = device_held_s(base, rows)
        busy, mean_util = sampler.busy()
    finally:
        server.terminate()
        try:
            server.wait(timeout=120)
        except subprocess.TimeoutExpired:
            server.kill()

    subprocess.run([sys.executable, "-m", "scripts.bench.plot_gpu_util", str(args.out / "gpu_batch_util.csv"),
                    "-o", str(args.out / "gpu_batch_util.svg")], cwd=ROOT, check=False)  # the GPU-busy timeline
    gpu = subprocess.run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"], check=False,
                         capture_output=True, text=True).stdout.strip().splitlines()
    expect_ok = sum(1 for s, r in zip(lines, rows) if r.get("status") == s["metadata"]["expect"])
    report = "\n".join([
        f"## A batch of {len(lines)} CUDA candidates through the CLI ({dt.date.today()})",
        "",
        (f"GPUs: {', '.join(gpu) or 'unknown'}. `python3 scripts/bench/gpu_batch.py`: `kernel-judge serve` (SQLite, "
         "embedded worker), then `kernel-judge batch gpu_batch.jsonl --watch`."),
        "",
        "| measure | value |",
        "|---|---|",
        f"| samples (lines) | {len(lines)} |",
        f"| distinct candidates (judged; the rest shared a verdict) | {distinct} |",
        f"| wall time, upload to last verdict | {wall:.0f} s |",
        f"| throughput | {len(lines) / wall * 3600:.0f} samples/h, "
        f"{distinct / wall * 3600:.0f} distinct candidates/h |",
        f"| GPU busy fraction (nvidia-smi utilization > 0) | {'-' if busy is None else f'{busy:.1%}'} |",
        f"| mean GPU utilization | {'-' if mean_util is None else f'{mean_util:.0f}%'} |",
        f"| device-held fraction (stage timestamps) | {held / wall:.1%} |",
        f"| verdicts equal to the corpus's `expect:` | {expect_ok}/{len(lines)} |",
        "",
        "```",
        table.rstrip(),
        "```",
        "",
    ])
    (args.out / "gpu_batch.md").write_text(report)
    print(report)
    return 0


if __name__ == "__main__":
    sys.exit(main())
