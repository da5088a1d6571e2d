"""ruff, configured in pyproject.toml ([tool.ruff]), finds nothing in the project's code.

tests/corpus is excluded there: its files are candidate kernels written the way an LLM writes them, data for
the judge rather than code of this project.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CHECKED = ["reference", "sandbox", "service", "scripts", "tests"]


def test_ruff_finds_nothing() -> None:
    result = subprocess.run([sys.executable, "-m", "ruff", "check", "--no-cache", *CHECKED], cwd=ROOT,
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, f"ruff check {' '.join(CHECKED)}:\n{result.stdout}{result.stderr}"


def test_the_corpus_is_not_linted_but_everything_else_is() -> None:
    # The exclusion must stay narrow: a file outside tests/corpus is checked, a corpus file is not.
    listed = subprocess.run([sys.executable, "-m", "ruff", "check", "--show-files", *CHECKED], cwd=ROOT,
                            capture_output=True, text=True, timeout=120).stdout
    files = {Path(line.strip()).resolve().relative_to(ROOT).as_posix() for line in listed.splitlines() if line.strip()}
    assert "service/main.py" in files and "tests/test_lint.py" in files
    assert not [f for f in files if f.startswith("tests/corpus/")]
