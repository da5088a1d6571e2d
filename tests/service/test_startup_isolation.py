"""A judging process refuses to start without bubblewrap (issue 7, item 5): `kernel-judge worker` and
`kernel-judge serve` exit non-zero before accepting work, and say how to install it. Real processes."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow  # starts real `serve` and `worker` processes

REPO = Path(__file__).resolve().parents[2]


def _run(tmp_path: Path, *args: str, **env: str) -> subprocess.CompletedProcess:
    environ = {k: v for k, v in os.environ.items() if k not in ("JUDGE_ISOLATION", "DATABASE_URL")}
    environ.update(JUDGE_DATA_DIR=str(tmp_path / "data"), DATABASE_URL=f"sqlite:///{tmp_path / 'judge.db'}", **env)
    return subprocess.run([sys.executable, "-m", "service.cli.main", *args], cwd=REPO, env=environ,
                          capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize("command", [["worker", "--max-jobs", "0"], ["serve", "--port", "1"]], ids=["worker", "serve"])
def test_refuses_to_start_without_bubblewrap(tmp_path: Path, command: list[str]) -> None:
    done = _run(tmp_path, *command, JUDGE_BWRAP="/nonexistent/bwrap")
    assert done.returncode != 0
    assert "bubblewrap is required" in done.stderr and "apt-get install bubblewrap" in done.stderr, done.stderr
    assert "JUDGE_BWRAP points at /nonexistent/bwrap" in done.stderr
    assert done.stderr.count("bubblewrap is required") == 1 and not done.stdout, done.stderr  # said once
    assert not (tmp_path / "judge.db").exists(), "nothing may start (not even migrations) before the check"


def test_worker_starts_with_an_explicit_weaker_opt_in(tmp_path: Path) -> None:
    done = _run(tmp_path, "worker", "--max-jobs", "0", JUDGE_BWRAP="/nonexistent/bwrap", JUDGE_ISOLATION="none")
    assert done.returncode == 0, done.stderr
    assert "JUDGE_ISOLATION=none: candidates run with weaker isolation" in done.stderr
