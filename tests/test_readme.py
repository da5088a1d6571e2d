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
    # CI runs the README's test command: the same line as .ci/run's pytest call, after the same install of the
    # extra that brings everything (.ci/run's `-q` aside).
    ci = (ROOT / ".ci" / "run").read_text().splitlines()
    ci_pytest = next(line for line in ci if line.startswith(".venv/bin/python -m pytest"))
    assert ".venv/bin/pip install -q -e '.[test-integrations]'" in ci
    test_command = f".venv/bin/pip install -e '.[test-integrations]' && {ci_pytest}"
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


def test_the_tours_files_exist_and_its_batch_adds_no_precompiled_header():
    """The tour's submit and batch name files of the repository; the batch's lines are what POST /v1/batches
    takes, and every C++ candidate in it asks for the flags of the submitted kernel (-O2), whose precompiled
    header the first submit already built: a sample with other flags would build one more (2-3 minutes on 2 cores)."""
    import json

    from sandbox.build.accel import wanted_flag_sets
    from service.api.schemas import SubmissionCreate

    tour = README[README.index("## A first tour"):README.index("## Read on")]
    submitted = ROOT / re.search(r"kernel-judge submit (\S+)", tour).group(1)
    batch = ROOT / re.search(r"kernel-judge batch (\S+) --watch", tour).group(1)
    assert submitted.is_file() and batch.is_file(), (submitted, batch)
    flags = wanted_flag_sets(submitted.read_text())
    assert flags == [("-O2",)]
    lines = batch.read_text().splitlines()
    assert len(lines) == 10  # "a batch of 10" (issue 42)
    samples = [SubmissionCreate.model_validate(json.loads(line)) for line in lines]
    assert {s.task for s in samples} == {"kl_div", "cross_entropy"}
    assert [s.sample_index for s in samples] == list(range(10))
    builds = [s for s in samples if "load_inline" in s.source]
    for sample in builds:
        code = sample.source.rsplit("```python\n", 1)[-1].split("```", 1)[0]  # a completion's code block
        assert wanted_flag_sets(code) == flags, sample.sample_index
    assert len(builds) >= 5  # real builds, not only cheap verdicts


def _closure(extras: dict[str, list[str]], extra: str) -> set[str]:
    """The distribution names an extra asks for, its references to this project's other extras followed."""
    from packaging.requirements import Requirement

    names = set()
    for line in extras[extra]:
        requirement = Requirement(line)
        if requirement.name == "kernel-judge":
            for inner in requirement.extras:
                names |= _closure(extras, inner)
        else:
            names.add(canonicalize_name(requirement.name))
    return names


def _installed_closure(names: set[str]) -> set[str]:
    """`names` and everything they require as installed here (their own extras left out), by distribution name."""
    from importlib.metadata import PackageNotFoundError, requires

    from packaging.requirements import Requirement

    seen, todo = set(), list(names)
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        try:
            wanted = requires(name) or []
        except PackageNotFoundError:  # a requirement of another platform or Python, not installed here
            continue
        for line in wanted:
            requirement = Requirement(line)
            if requirement.marker is None or requirement.marker.evaluate({"extra": ""}):
                todo.append(canonicalize_name(requirement.name))
    return seen


def canonicalize_name(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


TRAINERS = {"trl", "verifiers", "transformers", "accelerate", "datasets"}
"""What takes minutes to install and only the slow tier's trainer-adapter tests use (issue 42: 280 s for [test])."""


def test_the_fast_tiers_extra_leaves_the_trainers_to_the_full_one():
    """README's fast tier installs [test], which brings no trainer library, not even through a dependency (read
    from what is installed here); [test-integrations], which CI and the full test command install, brings [test]
    and the trainers."""
    import tomllib

    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    light, full = _closure(extras, "test"), _closure(extras, "test-integrations")
    assert light < full and {"trl", "verifiers"} <= full
    assert not TRAINERS & _installed_closure(light), TRAINERS & _installed_closure(light)
    fast_tier = ".venv/bin/pip install -e '.[test]' && .venv/bin/python -m pytest -m \"not slow\""
    assert fast_tier in [line for _, line in _fenced_lines(README)]


def test_every_module_importing_a_trainer_is_marked_integrations():
    """Without [test-integrations] the fast tier must not import these modules (tests/conftest.py leaves out those
    marked `integrations`), so a top-level import of a trainer library, or of the adapter module that imports one,
    needs the mark; and the mark is what makes their tests slow."""
    import ast

    from tests.conftest import INTEGRATIONS_ONLY, _marked_integrations

    wanting = ("service.integrations.verifiers", *INTEGRATIONS_ONLY)
    found = []
    for path in sorted((ROOT / "tests").rglob("test_*.py")):
        if "corpus" in path.parts:
            continue
        imported = set()
        for node in ast.parse(path.read_text()).body:
            if isinstance(node, ast.Import):
                imported |= {alias.name for alias in node.names}
            elif isinstance(node, ast.ImportFrom) and node.module:
                imported.add(node.module)
        if any(name == want or name.startswith(want + ".") for name in imported for want in wanting):
            found.append(path.relative_to(ROOT).as_posix())
            assert _marked_integrations(path), f"{path.name} imports a trainer library without the mark"
    assert "tests/integrations/test_trl.py" in found and "tests/integrations/test_verifiers.py" in found
