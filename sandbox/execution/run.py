"""`execute`: one prepared candidate judged on a device, its phases in the order they run.

The phases themselves are `Execution`'s methods (sandbox/execution/phases.py; a training step's in
sandbox/execution/training.py); this module sets a run up, runs them, and turns how they ended into a Verdict.
Until `Execution.candidate_loaded` is set, no candidate code has run, so a failure of the child is the
judge's (system_error, retried); from then on it is the candidate's.
"""

from __future__ import annotations

import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

import torch

from reference import Task, get_task
from sandbox import isolation
from sandbox.candidate import PreparedCandidate
from sandbox.config import JudgeConfig
from sandbox.execution.baseline import get_baselines
from sandbox.execution.phases import Execution
from sandbox.execution.records import STAGE_LABELS, Stage, _Stop
from sandbox.execution.training import execution_class
from sandbox.execution.spares import WarmChild
from sandbox.supervisor import ChildFailure, ChildFailureKind
from sandbox.verdict import Performance, Status, Verdict


def execute(prepared: PreparedCandidate, device: str, *, config: JudgeConfig | None = None,
            child: WarmChild | None = None) -> Verdict:
    """Run the prepared candidate in an isolated child on `device`: correctness trials, then timing.

    `child`: a pre-started child for this task and device (sandbox/execution/warm.py), used for this candidate
    alone and killed at the end; without one (or with one for another task or device), a child is started here.
    """
    config = config or JudgeConfig()
    task = get_task(prepared.task_id)
    if child is not None and (child.task_id != task.id or child.device != device):
        return _on_a_child_of_its_own(prepared, device, config, child)
    run = _set_up(task, prepared, device, config, child)
    identity = {"task": task.id.value, "device": device, "judged_sha256": prepared.code_sha256,
                "toolchain": prepared.toolchain, "imports": prepared.imports, "compile_log": prepared.compile_log}
    try:
        with run.stage(Stage.BASELINES):
            baselines = get_baselines(task.id, device, run.shape, config)
    except Exception as exc:  # noqa: BLE001 - our measurement failed: not the candidate's fault
        if child is not None:
            child.discard()
        return Verdict(status=Status.SYSTEM_ERROR, diagnosis=f"baseline measurement failed: {exc}",
                       stages=run.stages, **identity)
    work_dir = _work_dir(prepared, config, child)
    fields: dict[str, Any] = {}
    details: dict[str, Any] = {"build_advice": prepared.build_advice} if prepared.build_advice else {}
    status, held = Status.CORRECT, time.monotonic()
    try:
        diagnosis = _phases(run, baselines, work_dir, fields, details)
    except _Stop as stop:
        status, diagnosis, details = stop.status, stop.diagnosis, {**details, **stop.details}
    except ChildFailure as failure:
        status, diagnosis = _child_failed(run, failure)
        details["failure"] = failure.kind
    except isolation.IsolationError as exc:
        status, diagnosis = Status.SYSTEM_ERROR, f"the sandbox could not start: {exc}"
    finally:
        if run.session is not None:
            run.session.close()
        shutil.rmtree(work_dir, ignore_errors=True)
    details["cost"] = _cost(run, held, child)
    unranked = run.unranked_reason if status is Status.CORRECT else None
    if unranked:
        diagnosis += f"; not ranked: {unranked}"
    return Verdict(status=status, diagnosis=diagnosis, stages=run.stages, trials=run.trials, details=details,
                   ranked=unranked is None, unranked_reason=unranked, **fields, **identity)


def _phases(run: Execution, baselines: dict, work_dir: Path, fields: dict[str, Any], details: dict[str, Any]) -> str:
    """Start, calibrate, load, correctness, timing, extra shapes; the diagnosis of a candidate that passed them."""
    with run.stage(Stage.START):
        run.start(work_dir, fields)
    with run.stage(Stage.CALIBRATION):
        run.calibrate()
    with run.stage(Stage.LOAD):
        run.load()
    with run.stage(Stage.CORRECTNESS):
        run.correctness()
    with run.stage(Stage.TIMING):
        perf, hidden_work = run.timing(baselines, details)
    fields["performance"] = perf
    diagnosis = _summary(perf)
    if hidden_work:
        flagged, batches = len(details["timing"]["hidden_work_batches"]), details["timing"]["timed_batches"]
        diagnosis += (f"; device work ran where the timing events do not look (another stream or thread) in "
                      f"{flagged} of {batches} timed batches, so those were timed by the host clock between "
                      "device-wide synchronisations")
    if run.config.check_extra_shapes:
        with run.stage(Stage.EXTRA_SHAPES):
            fields["extra_shapes"] = run.extras
            run.extra_shapes(run.task.extra_shapes if run.is_cuda else run.task.cpu_extra_shapes)
        bad = [e for e in run.extras if not e.passed]
        if bad:
            diagnosis += (f"; fails {len(bad)} of {len(run.extras)} extra shapes (reported, not part of the "
                          f"verdict): first {bad[0].shape}: {bad[0].message}")
    return diagnosis


def _on_a_child_of_its_own(prepared: PreparedCandidate, device: str, config: JudgeConfig,
                           child: WarmChild) -> Verdict:
    """Judged by a child started here instead of a pre-started one for another task or device. The unfit one's
    process ends now, but its pool hears of its end only after this candidate: on the CPU the pool starts no
    spare beside a candidate in flight, and a start beside a cold candidate's timing pushes an honest one under
    the timing bound on 2 cores."""
    child.session.kill()
    try:
        return execute(prepared, device, config=config)
    finally:
        child.discard()


def _set_up(task: Task, prepared: PreparedCandidate, device: str, config: JudgeConfig,
            child: WarmChild | None) -> Execution:
    """The run's state: the task's kind of execution (a training step's checks its gradient too) at the shape
    of the device's kind, on the pre-started child if there is one."""
    shape = task.official_shape if torch.device(device).type == "cuda" else task.cpu_shape
    run = execution_class(task)(task, device, config, shape, dict(prepared.stages))
    run.warm = child
    run.build_dir, run.source_path = prepared.build_dir, prepared.source_path
    return run


def _work_dir(prepared: PreparedCandidate, config: JudgeConfig, child: WarmChild | None) -> Path:
    """The run's private copy of the build: what the candidate writes while running cannot change its cached
    build. A pre-started child's own directory is bound at its /build already: what is copied there, it sees."""
    runs_root = config.build_root.parent / "runs"
    runs_root.mkdir(parents=True, exist_ok=True)
    work_dir = child.work_dir if child is not None else Path(tempfile.mkdtemp(prefix=f"{prepared.build_key[:12]}-",
                                                                               dir=runs_root))
    shutil.copytree(prepared.build_dir, work_dir, dirs_exist_ok=True, symlinks=True)
    return work_dir


def _child_failed(run: Execution, failure: ChildFailure) -> tuple[Status, str]:
    """The verdict of a child that stopped answering: the candidate's, unless no candidate code had run yet
    (then the sandbox or the machine failed)."""
    status, diagnosis = _failure_verdict(failure, STAGE_LABELS[run.current])
    if not run.candidate_loaded:
        return Status.SYSTEM_ERROR, f"the judge's child failed before loading the candidate: {diagnosis}"
    return status, diagnosis


def _cost(run: Execution, held: float, child: WarmChild | None) -> dict[str, Any]:
    """What judging this candidate cost: the device is held from the child's start to its end."""
    return {"device_held_s": round(time.monotonic() - held, 4), "truth_checks": run.truth_checks,
            "parent_cpu_s": {k: round(v, 4) for k, v in run.parent_cpu_s.items()},
            "pre_started": child.cost() if child is not None else None}


def _failure_verdict(failure: ChildFailure, step: str) -> tuple[Status, str]:
    tail = "\n".join(failure.stderr.strip().splitlines()[-15:])
    suffix = f"\nlast output:\n{tail}" if tail else ""
    if failure.kind == ChildFailureKind.TIMEOUT:
        return Status.TIMEOUT, f"{step} did not finish: {failure}{suffix}"
    if failure.kind == ChildFailureKind.PROTOCOL:
        return Status.TAMPER_DETECTED, f"{step}: {failure}"
    if failure.oom:
        # A runaway allocation that timed out says how much it grew (supervisor.py); a hard kill says so.
        what = str(failure) if failure.kind == ChildFailureKind.OOM and "while" in str(failure) else "was killed"
        return Status.RUNTIME_ERROR, f"{step}: exceeded the sandbox memory limit: {what}{suffix}"
    if failure.kind == ChildFailureKind.EXITED and failure.returncode == 0:
        return Status.TAMPER_DETECTED, (f"{step}: the process exited cleanly in the middle of judging "
                                        f"(sys.exit/os._exit from candidate code){suffix}")
    if failure.signal_name:
        return Status.RUNTIME_ERROR, f"{step}: the process crashed ({failure.signal_name}){suffix}"
    return Status.RUNTIME_ERROR, f"{step}: the process exited with code {failure.returncode}{suffix}"


def _summary(perf: Performance) -> str:
    stats = perf.candidate
    parts = [f"correct: {stats.median_ms:.4f} ms median (IQR {stats.q25_ms:.4f}-{stats.q75_ms:.4f}, {stats.reps} runs)"]
    parts += [f"{s:.2f}x vs {name}" for name, s in perf.speedups.items()]
    if perf.speed_of_light_fraction is not None:
        parts.append(f"{100 * perf.speed_of_light_fraction:.0f}% of speed-of-light")
    return ", ".join(parts)
