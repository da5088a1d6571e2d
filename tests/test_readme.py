"""The README gets a user started on its first screen and stays short; the rest lives in docs/user-guide.md and
docs/operator-guide.md, each linked from it once, and every link in the three resolves."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text()
GUIDES = {name: ROOT / name for name in ("docs/user-guide.md", "docs/operator-guide.md")}
FIRST_SCREEN_LINES = 50
INSTALL_AND_SERVE = ("apt-get update && apt-get install -y bubblewrap g++ ninja-build; python3 -m venv .venv && "
                     ".venv/bin/pip install torch==2.13.0 -e . && JUDGE_ADMIN_KEY=secret .venv/bin/kernel-judge serve")
LINK = re.compile(r"\]\(([^)#\s]+)(?:#[^)]*)?\)")


def _fenced_lines(text: str) -> list[tuple[int, str]]:
    """(line number, line) of every line inside a ``` block."""
    inside, found = False, []
    for number, line in enumerate(text.splitlines(), 1):
        if line.startswith("```"):
            inside = not inside
        elif inside:
            found.append((number, line))
    return found


def test_the_readme_is_short_and_its_first_screen_has_the_two_commands():
    assert len(README.splitlines()) < 200
    # CI runs the README's test command: the same line as .ci/run's pytest call, after the install of [test].
    ci_pytest = next(line for line in (ROOT / ".ci" / "run").read_text().splitlines()
                     if line.startswith(".venv/bin/python -m pytest"))
    test_command = f".venv/bin/pip install -e '.[test]' && {ci_pytest}"
    blocks = dict((line, number) for number, line in _fenced_lines(README))
    for command in (INSTALL_AND_SERVE, test_command):
        assert command in blocks and blocks[command] <= FIRST_SCREEN_LINES, command
    assert "The full suite runs in two processes" in README  # the suite's size and time stay in the README


def test_each_guide_is_linked_once_and_every_link_resolves():
    links = LINK.findall(README)
    for name, path in GUIDES.items():
        assert links.count(name) == 1, (name, links)
        assert path.is_file() and len(path.read_text().splitlines()) > 50
    for doc in (ROOT / "README.md", *GUIDES.values()):
        for target in LINK.findall(doc.read_text()):
            if "://" not in target:
                assert (doc.parent / target).exists(), f"{doc.name} links {target}, which is not there"


def test_what_left_the_readme_is_in_the_guides():
    user, operator = (path.read_text() for path in GUIDES.values())
    for heading in ("## The tour over HTTP", "## More from the command line", "## A host without a GPU",
                    "## Web pages", "## Who sees a kernel's source", "## The HTTP API"):
        assert heading in user and heading not in operator, heading
    for heading in ("## What runs where", "## Serving", "## A GPU host", "## Docker and many GPU hosts",
                    "## Operations", "## Configuration", "## GPU acceptance"):
        assert heading in operator and heading not in user, heading
    assert "POST $JUDGE_URL/v1/rewards" in user and "--language cpp" in user
    assert "kernel-judge fake-model --port 8100" in user and "kernel-judge fake-model --port 8100" in README
    assert "| `JUDGE_DATA_DIR` | `~/.local/share/kernel-judge` |" in operator
