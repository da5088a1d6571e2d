"""The CLI's client commands and the settings import no torch (issue 42): `kernel-judge submit`, `status`,
`leaderboard`, `batch`, `results` and `generate` only talk HTTP, and torch's import cost 3 s an idle 2-core box and
7-9 s beside a header build, every command. Checked in a fresh interpreter (this one has torch)."""

from __future__ import annotations

import subprocess
import sys

import pytest

PROBE = """
import sys
import service.cli.main
from service.core.config import Settings
Settings(warm_baselines="kl_div,cross_entropy")
try:
    Settings(warm_baselines="kl_div,softmax")
except ValueError as exc:
    assert "valid task ids: kl_div, cross_entropy" in str(exc), exc
else:
    raise SystemExit("softmax was taken as a task")
print(sorted(name for name in ("torch", "sandbox", "reference.task") if name in sys.modules))
"""


def test_the_cli_and_the_settings_import_no_torch() -> None:
    done = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip() == "[]", done.stdout


@pytest.mark.parametrize("command", [["status", "--help"], ["submit", "--help"], ["batch", "--help"]])
def test_a_client_command_starts_without_torch(command: list[str]) -> None:
    probe = ("import runpy, sys\nsys.argv = ['kernel-judge', *sys.argv[1:]]\n"
             "try:\n    runpy.run_module('service.cli.main', run_name='__main__')\nexcept SystemExit:\n    pass\n"
             "assert 'torch' not in sys.modules, 'torch was imported'\n")
    done = subprocess.run([sys.executable, "-c", probe, *command], capture_output=True, text=True, timeout=120,
                          check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "Usage" in done.stdout, done.stdout[-2000:]
