"""KernelBench interop: a KernelBench run directory imported as a batch through the CLI, judged by a real
worker, and exported as the eval_results.json (and baseline files) KernelBench's analysis scripts read."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from service import crud
from service.interop.kernelbench import parse_kernelbench_id, scan_run_dir
from tests.service.conftest import CORPUS, CORRECT_KL_DIV, ROOT

CLI = [sys.executable, "-m", "service.cli.main"]


def _run_dir(root):
    """A KernelBench `runs/<name>/` as its generate_samples.py leaves it."""
    run = root / "my_run"
    run.mkdir()
    (run / "generation_config.yaml").write_text("level: 1\nmodel_name: deepseek-coder\nnum_samples: 2\n")
    files = {"level_1_problem_98_sample_0_kernel.py": CORRECT_KL_DIV,
             "level_1_problem_98_sample_1_kernel.py": CORPUS / "cpu" / "compile_error.py",
             "level_1_problem_95_sample_0_kernel.py": CORPUS / "cpu" / "no_candidate.md",
             "level_1_problem_1_sample_0_kernel.py": CORRECT_KL_DIV}  # a problem this judge has no task for
    for name, source in files.items():
        (run / name).write_text(source.read_text())
    (run / "level_1_problem_98_sample_0_prompt.txt").write_text("the prompt")
    return run


@pytest.mark.parametrize("db_url", ["sqlite"], indirect=True)
def test_import_run_dir_then_export_eval_results(db, live_api, spawn, tmp_path):
    with db.transaction() as session:
        key = crud.create_key(session, "judy")[1]
    _, base = live_api()
    spawn("worker")
    run = _run_dir(tmp_path)

    imported = subprocess.run([*CLI, "import-kernelbench", str(run), "--watch", "--url", base, "--key", key],
                              check=False, capture_output=True, text=True, cwd=ROOT, timeout=580)
    assert imported.returncode == 0, imported.stderr
    batch_id = imported.stdout.splitlines()[0]
    assert "skipped level_1_problem_1_sample_0_kernel.py" in imported.stderr

    out = tmp_path / "export"
    exported = subprocess.run([*CLI, "export-kernelbench", batch_id, str(out), "--url", base, "--key", key],
                              check=False, capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert exported.returncode == 0, exported.stderr
    results = json.loads((out / "eval_results.json").read_text())
    assert list(results) == ["95", "98"]
    (ce,) = results["95"]
    honest, broken = results["98"]
    assert (honest["sample_id"], broken["sample_id"], ce["sample_id"]) == (0, 1, 0)
    assert honest["compiled"] is True and honest["correctness"] is True
    assert honest["runtime"] > 0 and honest["runtime_stats"]["mean"] == honest["runtime"]
    assert honest["runtime_stats"]["num_trials"] > 0 and honest["ref_runtime"] > 0
    assert honest["metadata"]["judge_status"] == "correct"
    assert broken["compiled"] is False and broken["correctness"] is False and broken["runtime"] == -1.0
    assert broken["metadata"]["judge_status"] == "compile_error"
    assert ce["correctness"] is False and ce["runtime_stats"] == {}
    eager = json.loads((out / "baseline_time_torch.json").read_text())
    assert eager["level1"]["98_KLDivLoss.py"]["mean"] == pytest.approx(honest["ref_runtime"])

    # The samples kept KernelBench's ids and the run's model.
    listed = subprocess.run([*CLI, "results", batch_id, "--url", base], check=False, capture_output=True, text=True,
                            cwd=ROOT, timeout=60)
    rows = [json.loads(line) for line in listed.stdout.splitlines()]
    assert {r["model"] for r in rows} == {"deepseek-coder"}
    assert rows[0]["metadata"]["kernelbench"] == {"run": "my_run", "level": 1, "problem_id": 95, "sample_id": 0,
                                                  "file": "level_1_problem_95_sample_0_kernel.py"}


def test_run_dir_layout_and_ids(tmp_path):
    run = _run_dir(tmp_path)
    found = [(k.level, k.problem_id, k.sample_id) for k in scan_run_dir(run)]
    assert found == [(1, 1, 0), (1, 95, 0), (1, 98, 0), (1, 98, 1)]  # the prompt and config files are not kernels
    assert parse_kernelbench_id("L1-98") == (1, 98)
    with pytest.raises(ValueError):
        parse_kernelbench_id("level1/98")
