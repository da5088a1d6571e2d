"""The CLI end to end: a 200-line JSONL through `kernel-judge batch --watch` against a real API process and a
real worker, then `results -o` as CSV and JSONL, `status` and `cancel` of the batch.

Most lines are duplicates or quick rejections, so only two candidates are built (the honest kernel and the
one that fails to compile, both also built by other service tests of the session, whose build cache this
one shares); the rest are judged without a build or share a verdict.
"""

from __future__ import annotations

import csv
import json
import subprocess
import sys
from collections import Counter

import pytest

from service import crud
from tests.service.conftest import CORPUS, ROOT

CLI = [sys.executable, "-m", "service.cli.main"]

# (file, task, expected verdict, lines): every distinct code is judged once, the other lines share its verdict.
KINDS = [
    (CORPUS / "cpu" / "kl_div_cpp_correct.py", "kl_div", "correct", 40),
    (CORPUS / "cpu" / "compile_error.py", "kl_div", "compile_error", 40),
    (CORPUS / "cpu" / "kl_div_wrong_direction.py", "kl_div", "incorrect", 40),
    (CORPUS / "cpu" / "no_candidate.md", "cross_entropy", "compile_error", 10),  # rejected before any build
    (CORPUS / "hostile" / "cpu" / "c1_import_reference.py", "kl_div", "policy_violation", 20),
    (CORPUS / "hostile" / "cpu" / "c5_exit_at_import.py", "kl_div", "tamper_detected", 20),
]
COMPLETIONS = 20  # the honest kernel again, as raw completions with different reasoning: same extracted code
MALFORMED = ["this is not json", "{}", json.dumps({"task": "kl_div"}), json.dumps({"task": "nope", "source": "x"}),
             json.dumps({"task": "kl_div", "source": "a", "completion": "b"}), "[1, 2]",
             json.dumps({"task": "kl_div", "source": "x", "sample_index": -1}), '{"task": "kl_div", "source": ',
             json.dumps({"task": "kl_div", "source": ""}), json.dumps({"source": "x"})]


def _lines() -> tuple[list[str], Counter]:
    lines, expected = [], Counter()
    for path, task, verdict, n in KINDS:
        code = path.read_text()
        for i in range(n):
            lines.append(json.dumps({"task": task, "source": code, "model": "model-a" if i % 2 else "model-b",
                                     "sample_index": i, "metadata": {"kind": path.stem}}))
        expected[verdict] += n
    correct = KINDS[0][0].read_text()
    for i in range(COMPLETIONS):
        lines.append(json.dumps({"task": "kl_div", "completion": f"Attempt {i}: fused log.\n```python\n{correct}```",
                                 "model": "model-a", "sample_index": 100 + i}))
    expected["correct"] += COMPLETIONS
    lines[50:50] = MALFORMED[:5]  # malformed lines in the middle and at the end: reported by their line number
    lines += MALFORMED[5:]
    assert len(lines) == 200
    return lines, expected


def _cli(*args: str, timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run([*CLI, *args], check=False, capture_output=True, text=True, cwd=ROOT, timeout=timeout)


@pytest.mark.parametrize("db_url", ["sqlite"], indirect=True)
def test_batch_watch_results_status_cancel(db, live_api, spawn, tmp_path):
    with db.transaction() as session:
        key = crud.create_key(session, "erin")[1]
    _, base = live_api()
    spawn("worker")
    lines, expected = _lines()
    upload = tmp_path / "samples.jsonl"
    upload.write_text("\n".join(lines) + "\n")

    done = _cli("batch", str(upload), "--watch", "--name", "cli-200", "--poll", "0.2", "--url", base, "--key", key,
                timeout=580)
    assert done.returncode == 0, done.stderr
    batch_id = done.stdout.splitlines()[0].strip()
    # Rejected lines are reported by line number on stderr; the good ones were judged anyway.
    for line in (51, 52, 53, 54, 55, 196, 197, 198, 199, 200):
        assert f"line {line}:" in done.stderr
    assert "accepted 190 samples" in done.stderr and "rejected 10 lines" in done.stderr
    # The summary: the verdict table with the count of each verdict, then the metrics table.
    table = done.stdout
    for verdict, n in expected.items():
        assert any(verdict in row and f" {n} " in row for row in table.splitlines()), (verdict, n, table)
    for metric in ("compiled", "fast_1 vs eager", "fast_2 vs torch.compile", "geomean speedup vs eager", "pass@1",
                   "kl_div / model-a", "cross_entropy / model-b"):
        assert metric in table, (metric, table)

    status = _cli("status", batch_id, "--json", "--url", base)
    view = json.loads(status.stdout)
    assert view["state"] == "done" and view["total"] == 190 and view["verdicts"] == dict(expected)

    csv_path, jsonl_path = tmp_path / "out.csv", tmp_path / "out.jsonl"
    assert _cli("results", batch_id, "-o", str(csv_path), "--url", base).returncode == 0
    assert _cli("results", batch_id, "-o", str(jsonl_path), "--url", base).returncode == 0
    rows = list(csv.DictReader(csv_path.open()))
    jsonl = [json.loads(line) for line in jsonl_path.read_text().splitlines()]
    assert len(rows) == len(jsonl) == 190
    assert Counter(r["status"] for r in rows) == expected == Counter(r["status"] for r in jsonl)
    # Line numbers are those of the upload: the rejected lines are absent, the others keep their place.
    assert [r["line"] for r in jsonl] == [n for n in range(1, 201) if n not in (51, 52, 53, 54, 55, *range(196, 201))]
    originals = [r for r in jsonl if not r["duplicate_of"]]
    assert len(originals) == len(KINDS)  # the 20 completions share the honest kernel's verdict
    assert all(r["correct"] == (r["status"] == "correct") for r in jsonl)
    assert jsonl[0]["metadata"] == {"kind": "kl_div_cpp_correct"}

    # Cancelling a finished batch changes nothing and says so.
    cancelled = _cli("cancel", batch_id, "--json", "--url", base, "--key", key)
    assert cancelled.returncode == 0 and json.loads(cancelled.stdout)["state"] == "done"
    # Someone else's key may not cancel it: exit code 4 (auth), one line, no traceback.
    with db.transaction() as session:
        other = crud.create_key(session, "mallory")[1]
    refused = _cli("cancel", batch_id, "--url", base, "--key", other)
    assert refused.returncode == 4 and "Traceback" not in refused.stderr and "only the key" in refused.stderr


@pytest.mark.parametrize("width", [80, 160])
def test_batch_watch_progress_fits_the_console_width(width):
    import io

    from rich.console import Console

    from service.cli import render
    from service.client import models

    batch = models.Batch(id="b", state="running", total=10_000, duplicates=250, progress=0.5984, eta_s=1234,
                         counts={"queued": 4000, "compiling": 12, "compiled": 3, "running": 1, "done": 5984},
                         verdicts={"correct": 1200, "incorrect": 900, "compile_error": 3000, "runtime_error": 400,
                                   "timeout": 84, "policy_violation": 300, "tamper_detected": 100})
    console = Console(width=width, record=True, file=io.StringIO(), force_terminal=True)
    progress = render.batch_progress(console)
    progress.add_task("judging", total=batch.total, completed=5984, eta=render.eta_text(batch),
                      counts=render.counts_text(batch))
    console.print(progress.get_renderable())
    lines = console.export_text().splitlines()
    assert all(len(line) <= width for line in lines), lines
    assert "5984/10000" in lines[0] and "eta 1234s" in lines[0], lines
    # Every field whole on one line: nothing cut, no `status n` split between lines.
    fields = [f"{s} {n}" for s, n in {**batch.counts, **batch.verdicts, "duplicates": 250}.items()]
    assert all(sum(field in line for line in lines) == 1 for field in fields), lines
