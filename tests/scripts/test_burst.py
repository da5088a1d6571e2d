"""scripts/gpu/burst.py on the CPU: a fresh `kernel-judge serve`, a handful of CPU candidates at once, the report.

The script runs as the lead runs it on a GPU host (a subprocess, the installed package), with `--device cpu`. The
candidates need no C++ build (a fresh precompiled header alone is ~40 s here, minutes on a loaded machine; the burst
test in tests/service/test_burst.py builds): one is decided by extraction, one by a run-time policy check, two by
their first trial; so there is no honest candidate, and no slowest honest hold to compare with.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from sandbox.shared import languages
from scripts.gpu import burst
from tests.sandbox.conftest import corpus_meta
from tests.service.conftest import free_port

ROOT = Path(__file__).resolve().parents[2]
FILES = ["exception.py", "kl_div_torch_only.py", "kl_div_wrong_direction.py", "no_candidate.md"]


@pytest.mark.slow
@pytest.mark.timeout(480)
def test_burst_script_on_the_cpu_reports_every_verdict_and_the_holds(tmp_path):
    out = tmp_path / "out"
    argv = [sys.executable, "scripts/gpu/burst.py", "--device", "cpu", "--count", "6", "--out", str(out),
            "--work", str(tmp_path / "work"), "--port", str(free_port()), "--timeout", "360",
            "--include", *FILES]
    run = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=450)
    assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-4000:]
    report = json.loads((out / "burst.json").read_text())

    assert report["count"] == report["done"] == report["as_expected"] == 6 and report["distinct_files"] == 4
    for c in report["candidates"]:  # the script's reading of `expect:` agrees with the corpus test's
        assert re.fullmatch(corpus_meta(ROOT / c["file"])["expect"], c["status"]), c
    assert [c["copy"] for c in report["candidates"]] == [0, 0, 0, 0, 1, 1]
    assert (tmp_path / "work" / "data" / "judge.db").exists() and (tmp_path / "work" / "cache").is_dir()

    holds = report["holds"]
    executed = [c for c in report["candidates"] if c["longest_hold_s"] is not None]
    # Extraction decides the completion without a device; the other five hold it once each.
    assert {c["file"].rsplit("/", 1)[1] for c in executed} == {"exception.py", "kl_div_torch_only.py",
                                                               "kl_div_wrong_direction.py"}
    assert holds["holds_total"] == len(executed) == 5 and holds["overlaps"] == 0 and holds["unplaced"] == 0
    assert all(c["longest_hold_s"] > 0 for c in executed)
    assert holds["slowest_honest_hold_s"] is None and holds["over_honest"] == []
    (lane,) = holds["busy_fraction_burst"]
    assert lane.endswith("/cpu") and 0 < holds["busy_fraction_burst"][lane] <= holds["busy_fraction_stage"][lane] <= 1
    assert holds["device_s_per_candidate"] == pytest.approx(holds["busy_s"][lane] / 6)
    assert 0 < report["last_verdict_s"] < 360
    text = (out / "burst.md").read_text()
    assert "verdicts as declared: **6 of 6**" in text and (out / "timeline.svg").read_text().startswith("<svg")


@pytest.mark.parametrize("installed", [False, True])
def test_a_file_in_a_kernel_language_the_host_lacks_is_expected_refused_for_it(installed, monkeypatch):
    """A fresh GPU host without the [languages] extra judged every CuTe and TileLang file compile_error 'not
    installed here' (7 of 64, 2026-11-27): the verdict the judge gives such a host, which the burst expects there."""
    monkeypatch.setattr(languages, "installed", lambda module: installed)
    dirs = [ROOT / d for d in burst.CORPUS["cuda"]]
    by_file = {c["file"].rsplit("/", 1)[1]: c for c in burst.candidates(dirs, 200, ["*"], [], False)}
    tilelang, cute, cuda = by_file["kl_div_tilelang.py"], by_file["c1_cute_kernel_never_launched.py"], \
        by_file["kl_div_fast.py"]
    assert cuda["expect"] == "correct" and cuda["absent_language"] is None
    assert tilelang["declared"] == "correct" and cute["declared"] == "policy_violation"
    if installed:
        assert tilelang["expect"] == "correct" and cute["expect"] == "policy_violation"
        assert tilelang["absent_language"] is cute["absent_language"] is None
    else:
        assert tilelang["expect"] == cute["expect"] == "compile_error"
        assert (tilelang["absent_language"], cute["absent_language"]) == ("tilelang", "cutlass")
    # A raw completion, or a file that does not parse, is read for its import lines (the CPU corpus has both).
    completion = "Here is my kernel.\n\n```python\nimport torch\nimport tilelang.language as T\n```\n"
    assert burst.absent_language(completion) == (None if installed else "tilelang")
    assert burst.absent_language("<!-- no code here -->\n") is None
    # The verdict must name the missing package: a compile error for another reason is not the one expected.
    sub = {"id": "x", "status": "done", "verdict": {"status": "compile_error", "diagnosis": "line 3: syntax"}}
    named = {**sub, "verdict": {"status": "compile_error", "diagnosis": "line 14: imports tilelang (TileLang), a "
                                "kernel language this judge cannot run: 'tilelang' is not installed here."}}
    assert burst.row_of(tilelang, named)["as_expected"] is not installed
    assert burst.row_of(tilelang, sub)["as_expected"] is False
