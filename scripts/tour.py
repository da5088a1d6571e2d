"""README.md's first tour, run as written and timed step by step (issue 42: under 5 minutes after `serve` is ready).

Starts the README's `serve` (`JUDGE_ADMIN_KEY=secret .venv/bin/kernel-judge serve`) on a fresh data directory and
fresh build and cache roots (JUDGE_DATA_DIR, JUDGE_BUILD_ROOT, JUDGE_CACHE_ROOT under a new temporary directory,
so the shared precompiled headers are built as on a new host), waits for /readyz, then runs each command of the
README's "A first tour" block through bash in the repository root, in order, as a user would paste it. The only
edits are the user's own: the key answered by the first `curl` replaces `kj_...`, the ids the CLI prints replace
`<id>` and `<batch id>`, and another `--port` is said in JUDGE_URL and `fake-model`, as the README asks. The
command ending in `&` (the fake model server) is started in the background and waited for on its port, as a
user would see it answer before the next line. Prints each step's seconds and the total, with the CPU seconds the
step cost (the step's own commands, and serve with its worker and sandboxed children) and the load average: on a
machine shared with other work the wall clock says more about the others than about the tour. Every process it
started is stopped at the end, and the first verdict's stages are printed (where its wait went). Exits 1 if a step
fails. The environment passes through to `serve`: `JUDGE_WARM_BASELINES=off` measures the tour without the
background compile of the references.

    .venv/bin/python scripts/tour.py                  # --port/--model-port when 8000/8100 are taken
"""

from __future__ import annotations

import argparse
import json
import os
import re
import resource
import signal
import socket
import sqlite3
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[1]
SERVE = "JUDGE_ADMIN_KEY=secret .venv/bin/kernel-judge serve"
"""The serve part of README.md's install-and-serve command (tests/test_readme.py holds the whole line)."""
READY_TIMEOUT_S = 300.0
STEP_TIMEOUT_S = 1800.0


def tour_commands(readme: str) -> list[str]:
    """The commands of README.md's "A first tour" block: comment lines dropped, continued lines joined."""
    section = readme[readme.index("## A first tour"):]
    block = section.split("```\n", 2)[1]
    commands, pending = [], ""
    for line in block.splitlines():
        if not pending and (not line.strip() or line.lstrip().startswith("#")):
            continue
        if line.rstrip().endswith("\\"):
            pending += line.rstrip()[:-1]
            continue
        commands.append((pending + line).strip())
        pending = ""
    return commands


def _uncommented(command: str) -> str:
    """The command without its trailing `# ...` remark (bash would drop it too; the placeholders live in it)."""
    return re.split(r"\s{2,}#\s", command, maxsplit=1)[0].strip()


def _free(port: int) -> bool:
    with socket.socket() as sock:
        return sock.connect_ex(("127.0.0.1", port)) != 0


def _wait_port(port: int, proc: subprocess.Popen, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while _free(port):
        if proc.poll() is not None:
            raise RuntimeError(f"the background command exited with {proc.returncode}")
        if time.monotonic() > deadline:
            raise RuntimeError(f"nothing listened on port {port} within {timeout:.0f} s")
        time.sleep(0.2)


def _wait_ready(url: str, serve: subprocess.Popen) -> float:
    """Seconds until /readyz answers 200."""
    start = time.monotonic()
    while True:
        if serve.poll() is not None:
            raise RuntimeError(f"serve exited with {serve.returncode} before it was ready")
        try:
            if httpx.get(f"{url}/readyz", timeout=5).status_code == 200:
                return time.monotonic() - start
        except httpx.TransportError:
            pass
        if time.monotonic() - start > READY_TIMEOUT_S:
            raise RuntimeError(f"/readyz did not answer 200 within {READY_TIMEOUT_S:.0f} s")
        time.sleep(0.5)


def _tree_cpu_s(root: int) -> float:
    """CPU seconds spent so far by process `root` and its descendants, the reaped ones included (/proc's utime,
    stime, cutime and cstime of the living ones)."""
    stats: dict[int, tuple[int, float]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:  # it ended meanwhile: its time is in its parent's cutime once reaped
            continue
        stats[int(entry.name)] = (int(fields[1]), sum(int(f) for f in fields[11:15]) / os.sysconf("SC_CLK_TCK"))
    total = 0.0
    for pid, (_, cpu) in stats.items():
        ancestor = pid
        while ancestor > 1 and ancestor != root:
            ancestor = stats.get(ancestor, (1, 0.0))[0]
        total += cpu if ancestor == root else 0.0
    return total


def _own_children_cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


class Tour:
    """The shell state a user carries from line to line: exported variables and the ids printed so far."""

    def __init__(self, env: dict[str, str], port: int, model_port: int) -> None:
        self.env = env
        self.port, self.model_port = port, model_port
        self.values: dict[str, str] = {}
        self.background: list[subprocess.Popen] = []

    def prepared(self, command: str) -> str:
        command = _uncommented(command)
        command = command.replace("127.0.0.1:8000", f"127.0.0.1:{self.port}")
        command = command.replace("--port 8100", f"--port {self.model_port}")
        command = command.replace("127.0.0.1:8100", f"127.0.0.1:{self.model_port}")
        for placeholder, name in (("kj_...", "key"), ("<batch id>", "batch"), ("<id>", "submission")):
            if placeholder in command:
                command = command.replace(placeholder, self.values[name])
        return command

    def run(self, command: str) -> str:
        """Runs one prepared command; returns its standard output (printed, with its standard error, as it goes)."""
        export = re.fullmatch(r"export (\w+)=(.*)", command)
        if export:
            self.env[export.group(1)] = subprocess.run(["bash", "-c", f"printf %s {export.group(2)}"],
                                                       env=self.env, text=True, capture_output=True,
                                                       check=True).stdout
            return ""
        if command.endswith("&"):
            proc = subprocess.Popen(["bash", "-c", f"exec {command[:-1].strip()}"], cwd=ROOT, env=self.env,
                                    start_new_session=True)
            self.background.append(proc)
            _wait_port(self.model_port, proc, 60)
            return ""
        done = subprocess.run(["bash", "-c", command], cwd=ROOT, env=self.env, text=True, stdout=subprocess.PIPE,
                              timeout=STEP_TIMEOUT_S)
        sys.stdout.write(done.stdout)
        if done.returncode != 0:
            raise RuntimeError(f"exit status {done.returncode}")
        return done.stdout

    def learn(self, command: str, output: str) -> None:
        """Keeps what a later line needs from this one's answer."""
        if "/v1/keys" in command:
            self.values["key"] = json.loads(output)["key"]
        elif "kernel-judge submit" in command:
            self.values["submission"] = output.split()[0]
        elif "kernel-judge batch" in command:
            self.values["batch"] = output.split()[0]

    def stop(self) -> None:
        for proc in self.background:
            _stop(proc)


def _stop(proc: subprocess.Popen) -> None:
    """SIGTERM to the process group it leads, SIGKILL if it is still there 30 s later."""
    if proc.poll() is not None:
        return
    os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(30)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--port", type=int, default=8000, help="serve's port (README: 8000)")
    parser.add_argument("--model-port", type=int, default=8100, help="the fake model's port (README: 8100)")
    args = parser.parse_args()
    for port in (args.port, args.model_port):
        if not _free(port):
            parser.error(f"port {port} is taken: pass another with --port / --model-port")
    fresh = Path(tempfile.mkdtemp(prefix="kj-tour-"))
    env = {**os.environ, "JUDGE_DATA_DIR": str(fresh / "data"), "JUDGE_BUILD_ROOT": str(fresh / "builds"),
           "JUDGE_CACHE_ROOT": str(fresh / "cache")}
    print(f"fresh data, build and cache roots under {fresh}", flush=True)
    serve_command = SERVE if args.port == 8000 else f"{SERVE} --port {args.port}"
    serve = subprocess.Popen(["bash", "-c", f"exec env {serve_command}"], cwd=ROOT, env=env, start_new_session=True,
                             stdout=open(fresh / "serve.log", "w"), stderr=subprocess.STDOUT)
    tour = Tour(env, args.port, args.model_port)
    times: list[tuple[str, float, float]] = []
    try:
        ready = _wait_ready(f"http://127.0.0.1:{args.port}", serve)
        print(f"serve ready after {ready:.1f} s (log: {fresh / 'serve.log'}); load average "
              f"{os.getloadavg()[0]:.1f} on {os.cpu_count()} cores", flush=True)
        for command in tour_commands((ROOT / "README.md").read_text()):
            prepared = tour.prepared(command)
            print(f"\n$ {prepared}", flush=True)
            start, cpu = time.monotonic(), _tree_cpu_s(serve.pid) + _own_children_cpu_s()
            output = tour.run(prepared)
            times.append((command, time.monotonic() - start, _tree_cpu_s(serve.pid) + _own_children_cpu_s() - cpu))
            tour.learn(prepared, output)
    except (RuntimeError, KeyError, ValueError, subprocess.SubprocessError) as exc:
        print(f"\nthe tour stopped: {exc}", file=sys.stderr)
        return 1
    finally:
        tour.stop()
        _stop(serve)
        _report(times)
        _first_verdict(fresh / "data" / "judge.db")
    return 0


def _first_verdict(db: Path) -> None:
    """Where the first verdict's time went (its stages over half a second): on a fresh host, the shared header it
    waited for (`pch_build`), its build, the host's first baselines, the run."""
    if not db.exists():
        return
    with sqlite3.connect(db) as conn:
        row = conn.execute("SELECT verdict FROM verdicts ORDER BY id LIMIT 1").fetchone()
    if row:
        stages = json.loads(row[0]).get("stages", {})
        print("first verdict's stages: " + ", ".join(f"{k} {v:.1f} s" for k, v in stages.items() if v >= 0.5))


def _report(times: list[tuple[str, float, float]]) -> None:
    print("\nseconds  CPU s  step")
    for command, seconds, cpu in times:
        print(f"{seconds:7.1f} {cpu:6.1f}  {_uncommented(command)[:100]}")
    print(f"{sum(s for _, s, _ in times):7.1f} {sum(c for _, _, c in times):6.1f}  total after serve was ready; "
          f"load average {os.getloadavg()[0]:.1f} (1 min), {os.getloadavg()[2]:.1f} (15 min)")


if __name__ == "__main__":
    sys.exit(main())
