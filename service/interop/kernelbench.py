"""KernelBench run directories in, KernelBench eval results out.

KernelBench (github.com/ScalingIntelligence/KernelBench) writes a run to `runs/<run_name>/`:
`generation_config.yaml`, and per problem and sample `level_<L>_problem_<P>_sample_<S>_kernel.py` (the
extracted candidate; `..._prompt.txt` beside it). Its `eval_from_generations.py` writes
`runs/<run_name>/eval_results.json`, which `benchmark_eval_analysis.py` reads together with a baseline file
`results/timing/<hardware>/<baseline>.json` (both paths can be overridden there).

The mapping, both ways (KernelBench -> this judge):

- level L, problem P -> the task whose `kernelbench_id` is `L<L>-<P>` (L1-95 cross_entropy, L1-98 kl_div).
- sample S, the kernel file's text -> a batch sample: `source`, `sample_index` S, and
  `metadata.kernelbench` = {run, level, problem_id, sample_id, file} (the export reads the ids back from it).
- `generation_config.yaml`'s model_name -> the sample's `model` (else the run directory's name).
- `compiled` <- the result row's `compiled` (the candidate built and imported).
- `correctness` <- the verdict is `correct` (every trial on fresh and adversarial inputs passed).
- `runtime` (ms, KernelBench's mean) <- the candidate's mean_ms; -1.0 unless correct.
- `runtime_stats` <- {mean, median, min, q25, q75, num_trials, hardware, device}; no std (the judge reports
  quartiles instead), KernelBench's analysis reads only `runtime`.
- `ref_runtime`, `ref_runtime_stats` <- the eager baseline, measured on the same card, same keys.
- `metadata` <- {judge_status, diagnosis, submission_id, duplicate_of}.
- the baseline file's `level1/<P>_<Name>.py`.mean <- written beside eval_results.json as
  `baseline_time_torch.json` (eager) and `baseline_time_torch_compile_inductor_default.json`, from the
  verdicts: pass one as `baseline_file=` to `benchmark_eval_analysis.py`, with `eval_results_dir=`.

Only the two tasks the judge knows are imported; other problems' files are listed as skipped.
"""

from __future__ import annotations

import json
import re
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from service.client import models

KERNEL_FILE = re.compile(r"^level_(\d+)_problem_(\d+)_sample_(\d+)_kernel\.py$")

PROBLEM_FILES = {"L1-95": "95_CrossEntropyLoss.py", "L1-98": "98_KLDivLoss.py"}
"""KernelBench's problem file names: the keys of its baseline timing files."""

BASELINE_FILES = {"eager": "baseline_time_torch.json", "compile": "baseline_time_torch_compile_inductor_default.json"}


@dataclass(frozen=True)
class KernelFile:
    level: int
    problem_id: int
    sample_id: int
    path: Path


def parse_kernelbench_id(kernelbench_id: str) -> tuple[int, int]:
    """`L1-98` -> (1, 98)."""
    match = re.fullmatch(r"L(\d+)-(\d+)", kernelbench_id)
    if not match:
        raise ValueError(f"not a KernelBench id: {kernelbench_id!r}")
    return int(match[1]), int(match[2])


def task_ids(tasks: Iterable[models.TaskSummary]) -> dict[tuple[int, int], str]:
    """(level, problem) -> task id, from the server's task list. KernelBench's problems are the forward tasks;
    a training variant shares its problem's id and is never what a KernelBench run generated for."""
    return {parse_kernelbench_id(t.kernelbench_id): t.id for t in tasks if t.variant == "forward"}


def scan_run_dir(run_dir: Path) -> list[KernelFile]:
    found = []
    for path in sorted(run_dir.iterdir()):
        match = KERNEL_FILE.match(path.name)
        if match and path.is_file():
            found.append(KernelFile(int(match[1]), int(match[2]), int(match[3]), path))
    return sorted(found, key=lambda k: (k.level, k.problem_id, k.sample_id))


def run_model(run_dir: Path) -> str:
    """The model KernelBench sampled from (generation_config.yaml's model_name), else the run's name."""
    config = run_dir / "generation_config.yaml"
    if config.exists():
        text = config.read_text(errors="replace")
        match = re.search(r"^model_name:\s*['\"]?([^'\"\n]+?)['\"]?\s*$", text, re.MULTILINE)
        if match:
            return match[1]
    return run_dir.name


def import_run(run_dir: Path, tasks: Iterable[models.TaskSummary], model: str | None = None
               ) -> tuple[list[dict[str, Any]], list[KernelFile]]:
    """Batch samples for the run's kernels of known tasks, and the files skipped (other problems)."""
    known = task_ids(tasks)
    model = model or run_model(run_dir)
    samples, skipped = [], []
    for kernel in scan_run_dir(run_dir):
        task = known.get((kernel.level, kernel.problem_id))
        if task is None:
            skipped.append(kernel)
            continue
        samples.append({
            "task": task, "source": kernel.path.read_text(encoding="utf-8", errors="replace"), "model": model,
            "sample_index": kernel.sample_id,
            "metadata": {"kernelbench": {"run": run_dir.name, "level": kernel.level, "problem_id": kernel.problem_id,
                                         "sample_id": kernel.sample_id, "file": kernel.path.name}}})
    return samples, skipped


def _stats(timing: dict[str, Any] | None, hardware: str | None, device: str | None) -> dict[str, Any]:
    if not timing:
        return {}
    return {"mean": timing.get("mean_ms"), "median": timing.get("median_ms"), "min": timing.get("min_ms"),
            "q25": timing.get("q25_ms"), "q75": timing.get("q75_ms"), "num_trials": timing.get("reps"),
            "hardware": hardware, "device": device}


def eval_entry(row: models.ResultRow, verdict: models.Verdict | None, sample_id: int) -> dict[str, Any]:
    """One KernelBench eval result for one result row (and, when correct, its full verdict)."""
    perf = (verdict.performance if verdict is not None else None) or {}
    env = (verdict.environment if verdict is not None else None) or {}
    hardware, device = env.get("device_name"), env.get("device")
    correct = bool(row.correct)
    candidate = perf.get("candidate") if correct else None
    eager = (perf.get("baselines") or {}).get("eager") if correct else None
    return {
        "sample_id": sample_id,
        "compiled": bool(row.compiled),
        "correctness": correct,
        "metadata": {"judge_status": row.status, "diagnosis": row.diagnosis, "submission_id": row.submission_id,
                     "duplicate_of": row.duplicate_of},
        "runtime": candidate["mean_ms"] if candidate else -1.0,
        "runtime_stats": _stats(candidate, hardware, device),
        "ref_runtime": eager["mean_ms"] if eager else -1.0,
        "ref_runtime_stats": _stats(eager, hardware, device),
    }


def kernelbench_ids(row: models.ResultRow, known: dict[str, tuple[int, int]]) -> tuple[int, int, int] | None:
    """(level, problem, sample) of a row: from the metadata an import wrote, else from its task and index."""
    meta = (row.metadata or {}).get("kernelbench") or {}
    if {"level", "problem_id", "sample_id"} <= meta.keys():
        return int(meta["level"]), int(meta["problem_id"]), int(meta["sample_id"])
    if row.task in known:
        level, problem = known[row.task]
        return level, problem, row.sample_index if row.sample_index is not None else (row.line or 1) - 1
    return None


def judged_id(row: models.ResultRow) -> str | None:
    """The submission that holds the row's verdict: the original, for a duplicate."""
    return row.duplicate_of or row.submission_id


def build_export(rows: Iterable[models.ResultRow], verdicts: dict[str, models.Verdict],
                 tasks: Iterable[models.TaskSummary]) -> tuple[dict[str, list], dict[str, dict]]:
    """eval_results.json's content (problem id -> entries by sample id) and the baseline files' content.
    `verdicts` holds the full verdicts of the correct rows, by `judged_id`."""
    tasks = list(tasks)
    known = {t.id: parse_kernelbench_id(t.kernelbench_id) for t in tasks}
    names = {t.id: PROBLEM_FILES.get(t.kernelbench_id, f"{known[t.id][1]}_{t.id}.py") for t in tasks}
    results: dict[str, list] = defaultdict(list)
    baselines: dict[str, dict] = {file: {} for file in BASELINE_FILES.values()}
    for row in rows:
        ids = kernelbench_ids(row, known)
        if ids is None:
            continue
        level, problem, sample = ids
        verdict = verdicts.get(judged_id(row) or "")
        results[str(problem)].append(eval_entry(row, verdict, sample))
        perf = (verdict.performance if verdict is not None else None) or {}
        env = (verdict.environment if verdict is not None else None) or {}
        for baseline, file in BASELINE_FILES.items():
            timing = (perf.get("baselines") or {}).get(baseline)
            if timing and row.task in names:
                level_key = baselines[file].setdefault(f"level{level}", {})
                level_key.setdefault(names[row.task], _stats(timing, env.get("device_name"), env.get("device")))
    problems = sorted(results, key=int)
    ordered = {k: sorted(results[k], key=lambda e: e["sample_id"]) for k in problems}
    return ordered, baselines


def write_export(out_dir: Path, eval_results: dict[str, list], baselines: dict[str, dict]) -> list[Path]:
    out_dir.mkdir(parents=True, exist_ok=True)
    written = [out_dir / "eval_results.json"]
    written[0].write_text(json.dumps(eval_results, indent=4))
    for file, content in baselines.items():
        if content:
            (out_dir / file).write_text(json.dumps(content, indent=4))
            written.append(out_dir / file)
    return written
