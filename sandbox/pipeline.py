"""The judging pipeline: extract -> static checks -> compile -> isolated run (correctness, timing) -> Verdict.

`prepare` is CPU-only work (the service runs it in a compile pool); `execute` needs the device and
runs one candidate at a time on it. Every way a candidate can fail ends in a `Verdict`; only a failure
of the judge's own machinery ends in `system_error`.
"""

from __future__ import annotations

import hashlib
import secrets
import shutil
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from reference import Task, get_task
from sandbox import compile as build
from sandbox import isolation
from sandbox.compare import compare, fingerprint, tensor_from_bytes, dtype_name
from sandbox.config import JudgeConfig
from sandbox.environment import describe
from sandbox.extract import ExtractionError, extract_candidate
from sandbox.static_checks import check_source
from sandbox.supervisor import ChildFailure, ChildSession
from sandbox.timing import plan_reps, summarize
from sandbox.verdict import Performance, Status, TimingStats, TrialResult, Verdict

TIMING_INPUT_SETS = 2
"""Input sets the timed calls cycle through (see `execute`)."""
PRE_CANDIDATE_STEPS = ("starting the sandbox", "start-up", "calibration")
"""Steps before the candidate is imported: a failure there is the judge's (system_error, retried)."""
CALIBRATION_REPS = 20
"""Calls of the empty timing loop the parent times to learn the loop's own cost per call."""
READY_TIMEOUT_S = 180.0
"""Starting the child: Python, torch and (on a GPU) a CUDA context; seconds on a loaded machine."""


@dataclass(frozen=True)
class PreparedCandidate:
    """A candidate that passed extraction and static checks and whose extensions are built."""

    task_id: str
    source: str
    """The extracted Python module defining ModelNew."""
    source_sha256: str
    build_key: str
    """sha256 of (source, toolchain): names the build directory; equal keys are compiled once."""
    build_dir: Path
    toolchain: str
    target: str
    """"cpu" or "cuda": what the extensions were built for."""
    imports: list[str] = field(default_factory=list)
    stages: dict[str, float] = field(default_factory=dict)
    compile_log: str = ""
    compile_cached: bool = False


def _sha256(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def _verdict(status: Status, diagnosis: str, task_id: str, device: str, source_sha: str, **kw: Any) -> Verdict:
    return Verdict(status=status, diagnosis=diagnosis, task=task_id, device=device, source_sha256=source_sha, **kw)


# --- prepare: extract, check, compile ------------------------------------------------------------

def prepare(task_id: str, raw_source: str, *, target: str = "cpu", config: JudgeConfig | None = None) -> PreparedCandidate | Verdict:
    """CPU-only stage. Returns a Verdict (compile_error, policy_violation, ...) when the candidate is rejected."""
    config = config or JudgeConfig()
    task = get_task(task_id)
    stages: dict[str, float] = {}
    t0 = time.monotonic()
    raw_sha = _sha256(raw_source)
    try:
        source = extract_candidate(raw_source)
    except ExtractionError as exc:
        return _verdict(Status.COMPILE_ERROR, f"no candidate found: {exc}", task.id.value, target, raw_sha,
                        details={"stage": "extract"})
    sha = _sha256(source)
    stages["extract"] = time.monotonic() - t0

    t0 = time.monotonic()
    try:
        report = check_source(source, task.forbidden_python_names, task.forbidden_aten_ops)
    except SyntaxError as exc:
        return _verdict(Status.COMPILE_ERROR, f"Python syntax error at line {exc.lineno}: {exc.msg}", task.id.value,
                        target, sha, stages=stages, details={"stage": "static_checks", "line": exc.lineno})
    stages["static_checks"] = time.monotonic() - t0
    common = dict(stages=stages, imports=report.imports)
    policy = [f for f in report.findings if f.rule in ("forbidden_operator", "judge_import")]
    if policy:
        first = policy[0]
        return _verdict(Status.POLICY_VIOLATION, f"line {first.line}: {first.message}", task.id.value, target, sha,
                        details={"stage": "static_checks", "rule": first.rule,
                                 "findings": [f.__dict__ for f in report.findings]}, **common)
    if report.findings:
        return _verdict(Status.COMPILE_ERROR, report.findings[0].message, task.id.value, target, sha,
                        details={"stage": "static_checks", "rule": report.findings[0].rule}, **common)

    chain = build.toolchain(target)
    key = build.build_key(source, chain)
    build_dir = config.build_root / key
    t0 = time.monotonic()
    with build.build_lock(config.build_root, key):
        result_path = build_dir / build.RESULT_FILE
        if result_path.exists():
            result = build.BuildResult.from_json(result_path.read_text())
        else:
            build.clear_build(build_dir)
            build_dir.mkdir(parents=True)
            (build_dir / build.SOURCE_FILE).write_text(source)
            try:
                result = _run_build(task, build_dir, target, config)
            except isolation.IsolationError as exc:
                return _verdict(Status.SYSTEM_ERROR, f"the build sandbox could not start: {exc}", task.id.value,
                                target, sha, **common)
            if not result.timed_out:
                result_path.write_text(result.to_json())
    stages["compile"] = time.monotonic() - t0
    log = build.trim_log(result.log)
    fields = dict(toolchain=chain, compile_log=log, **common)
    if result.tripwire_hits:
        return _verdict(Status.POLICY_VIOLATION, f"called {result.tripwire_hits[0]} while being imported",
                        task.id.value, target, sha, details={"stage": "compile", "rule": "forbidden_operator",
                                                            "calls": list(result.tripwire_hits)}, **fields)
    if result.timed_out:
        return _verdict(Status.TIMEOUT, f"compilation did not finish within {config.compile_timeout_s:.0f} s",
                        task.id.value, target, sha, details={"stage": "compile"}, **fields)
    if result.build_failed:
        errors = build.first_errors(result.log)
        head = "\n".join(errors) if errors else (result.error or {}).get("message", "")[:2000]
        return _verdict(Status.COMPILE_ERROR, f"the extension failed to compile:\n{head}", task.id.value, target, sha,
                        details={"stage": "compile", "errors": errors}, **fields)
    return PreparedCandidate(task_id=task.id.value, source=source, source_sha256=sha, build_key=key,
                             build_dir=build_dir, toolchain=chain, target=target, imports=report.imports,
                             stages=stages, compile_log=log, compile_cached=result.cached)


def _run_build(task: Task, build_dir: Path, target: str, config: JudgeConfig) -> build.BuildResult:
    """Import the candidate in a GPU-less isolated child so its extensions build into build_dir."""
    extra = {"TORCH_CUDA_ARCH_LIST": build.cuda_arch_list(), "CUDA_VISIBLE_DEVICES": ""} if target == "cuda" else {}
    started = time.monotonic()
    session = ChildSession("compile", task.id.value, "cpu", build_dir, config, gpu=False, extra_env=extra,
                           wall_s=config.compile_timeout_s + 30)
    try:
        reply = session.receive(config.compile_timeout_s)
    except ChildFailure as failure:
        timed_out = failure.kind == "timeout"
        return build.BuildResult(ok=False, build_failed=False, log=failure.stderr, seconds=time.monotonic() - started,
                                 error={"type": failure.kind, "message": str(failure)}, timed_out=timed_out)
    finally:
        session.close()
    header = reply.header
    error = header.get("error") if isinstance(header.get("error"), dict) else None
    log = session.stderr()
    if error:
        log = f"{error.get('message', '')}\n{log}"
    return build.BuildResult(ok=bool(header.get("ok")), build_failed=bool(header.get("build_failed")), log=log,
                             seconds=time.monotonic() - started, error=error,
                             tripwire_hits=tuple(str(h) for h in header.get("tripwire_hits", [])))


# --- execute: correctness, policy, timing -------------------------------------------------------

class _Stop(Exception):
    """Ends execution early with a verdict."""

    def __init__(self, status: Status, diagnosis: str, **details: Any) -> None:
        super().__init__(diagnosis)
        self.status = status
        self.diagnosis = diagnosis
        self.details = details


@dataclass
class _Run:
    task: Task
    device: str
    config: JudgeConfig
    session: ChildSession
    trials: list[TrialResult] = field(default_factory=list)
    custom_evidence: set[str] = field(default_factory=set)

    def check_reply(self, header: dict[str, Any], step: str, op: str | None = None) -> None:
        """What every reply must show: no forbidden call, no tampering, no stray threads or processes."""
        if op is not None and header.get("op") != op:
            raise _Stop(Status.TAMPER_DETECTED, f"{step}: the reply is not an answer to {op!r} (a forged or "
                        "corrupted message on the result channel)", rule="protocol")
        hits = header.get("tripwire_hits") or []
        if hits:
            raise _Stop(Status.POLICY_VIOLATION, f"called the forbidden operator {hits[0]} during {step}",
                        rule="forbidden_operator", calls=hits)
        tampered = header.get("tampered") or []
        if tampered:
            raise _Stop(Status.TAMPER_DETECTED, f"modified the judge's objects during {step}: {', '.join(tampered[:8])}",
                        rule="integrity", changed=tampered)
        if (header.get("python_threads") or 0) > 0:
            raise _Stop(Status.TAMPER_DETECTED, f"left {header['python_threads']} extra Python thread(s) running "
                        f"after {step}: work must finish inside forward()", rule="threads")
        if header.get("processes"):
            raise _Stop(Status.TAMPER_DETECTED, f"left processes running after {step}: {header['processes'][:3]}",
                        rule="processes")
        if not header.get("ok"):
            error = header.get("error") or {}
            what = f"{error.get('type', 'error')}: {str(error.get('message', ''))[:1500]}"
            where = f" at {error['where']}" if error.get("where") else ""
            if header.get("oom"):
                raise _Stop(Status.RUNTIME_ERROR, f"ran out of device memory during {step}{where}: {what}", error=error)
            raise _Stop(Status.RUNTIME_ERROR, f"raised during {step}{where}: {what}", error=error)

    def output(self, header: dict[str, Any], payloads: list[bytes], step: str) -> torch.Tensor:
        expected_dtype = dtype_name(self.task.output_dtype)
        if header.get("dtype") != expected_dtype:
            raise _Stop(Status.INCORRECT, f"{step}: output dtype is {header.get('dtype')}, expected {expected_dtype}")
        if list(header.get("shape", [])) != list(self.task.output_shape):
            raise _Stop(Status.INCORRECT, f"{step}: output shape is {header.get('shape')}, expected "
                        f"{list(self.task.output_shape)}")
        try:
            return tensor_from_bytes(payloads[0] if payloads else b"", header["dtype"], header["shape"])
        except ValueError as exc:
            raise _Stop(Status.TAMPER_DETECTED, f"{step}: malformed output payload: {exc}", rule="protocol") from None

    def truth(self, shape: tuple[int, ...], distribution: str, seed: int) -> tuple[torch.Tensor, list[str]]:
        """fp64 ground truth and input fingerprints, computed here in the trusted parent."""
        inputs = self.task.make_inputs(shape, distribution, seed, torch.device(self.device))
        truth = self.task.ground_truth(inputs).cpu()
        prints = fingerprint(inputs)
        del inputs
        return truth, prints

    def trial(self, index: int, shape: tuple[int, ...], distribution: str, *, extra: bool = False) -> TrialResult:
        seed = secrets.randbits(62)
        truth, prints = self.truth(shape, distribution, seed)
        step = f"{'extra shape' if extra else 'trial'} {index} ({distribution}, shape {list(shape)})"
        reply = self.session.request({"op": "trial", "shape": list(shape), "distribution": distribution, "seed": seed},
                                     self.config.call_timeout_s)
        header = reply.header
        self.check_reply(header, step, "trial")
        base = dict(trial=index, distribution=distribution, shape=list(shape), seed=seed)
        if header.get("rejected_output"):
            return TrialResult(**base, passed=False, message=header["rejected_output"])
        if header.get("before") != prints:
            raise _Stop(Status.TAMPER_DETECTED, f"{step}: the inputs the child generated differ from the judge's: "
                        "the input generator was tampered with", rule="inputs", judge=prints,
                        child=header.get("before"))
        if header.get("after") != prints:
            return TrialResult(**base, passed=False, message="forward() modified its inputs in place")
        self.custom_evidence.update(header.get("custom_calls") or [])
        self.custom_evidence.update(header.get("custom_ops") or [])
        self.custom_evidence.update(header.get("custom_kernels") or [])
        try:
            out = self.output(header, reply.payloads, step)
        except _Stop as stop:
            if stop.status is Status.INCORRECT:
                return TrialResult(**base, passed=False, message=stop.diagnosis)
            raise
        cmp = compare(out, truth, self.task.tolerance.atol, self.task.tolerance.rtol)
        return TrialResult(**base, passed=cmp.passed, max_abs_error=cmp.max_abs_error, max_rel_error=cmp.max_rel_error,
                           worst_index=cmp.worst_index, expected=cmp.expected, got=cmp.got, message=cmp.message)


def _failure_verdict(failure: ChildFailure, step: str) -> tuple[Status, str]:
    tail = "\n".join(failure.stderr.strip().splitlines()[-15:])
    suffix = f"\nlast output:\n{tail}" if tail else ""
    if failure.kind == "timeout":
        return Status.TIMEOUT, f"{step} did not finish: {failure}{suffix}"
    if failure.kind == "protocol":
        return Status.TAMPER_DETECTED, f"{step}: {failure}"
    if failure.oom:
        return Status.RUNTIME_ERROR, f"{step}: exceeded the sandbox memory limit and was killed{suffix}"
    if failure.kind == "exited" and failure.returncode == 0:
        return Status.TAMPER_DETECTED, (f"{step}: the process exited cleanly in the middle of judging "
                                        f"(sys.exit/os._exit from candidate code){suffix}")
    if failure.signal_name:
        return Status.RUNTIME_ERROR, f"{step}: the process crashed ({failure.signal_name}){suffix}"
    return Status.RUNTIME_ERROR, f"{step}: the process exited with code {failure.returncode}{suffix}"


def execute(prepared: PreparedCandidate, device: str, *, config: JudgeConfig | None = None) -> Verdict:
    """Run the prepared candidate in an isolated child on `device`: correctness trials, then timing."""
    config = config or JudgeConfig()
    task = get_task(prepared.task_id)
    stages = dict(prepared.stages)
    is_cuda = torch.device(device).type == "cuda"
    shape = task.official_shape if is_cuda else task.cpu_shape
    extra_shapes = task.extra_shapes if is_cuda else task.cpu_extra_shapes
    base = dict(task=task.id.value, device=device, source_sha256=prepared.source_sha256, toolchain=prepared.toolchain,
                imports=prepared.imports, compile_log=prepared.compile_log)

    from sandbox.baseline import get_baselines  # here, so `python -m sandbox.baseline` runs cleanly

    t0 = time.monotonic()
    try:
        baselines = get_baselines(task.id.value, device, shape, config)
    except Exception as exc:  # noqa: BLE001 - our measurement failed: not the candidate's fault
        return Verdict(status=Status.SYSTEM_ERROR, diagnosis=f"baseline measurement failed: {exc}", stages=stages, **base)
    stages["baselines"] = time.monotonic() - t0

    runs_root = config.build_root.parent / "runs"
    runs_root.mkdir(parents=True, exist_ok=True)
    work_dir = Path(tempfile.mkdtemp(prefix=f"{prepared.build_key[:12]}-", dir=runs_root))
    # A private copy: what the candidate writes while running cannot change its cached build.
    shutil.copytree(prepared.build_dir, work_dir, dirs_exist_ok=True, symlinks=True)
    verdict_fields: dict[str, Any] = {}
    status, diagnosis, details = Status.CORRECT, "", {}
    session: ChildSession | None = None
    run: _Run | None = None
    step = "starting the sandbox"
    try:
        session = ChildSession("execute", task.id.value, device, work_dir, config, gpu=is_cuda,
                               wall_s=config.run_timeout_s)
        verdict_fields["environment"] = describe(device, session.mechanism)
        run = _Run(task, device, config, session)
        step = "start-up"
        ready = session.receive(READY_TIMEOUT_S)
        if ready.header.get("op") != "ready":
            raise _Stop(Status.TAMPER_DETECTED, "the child's first message was not 'ready'", rule="protocol")

        step = "calibration"
        official = task.distributions[0]
        cal = session.request({"op": "calibrate", "reps": 50, "shape": list(shape), "distribution": official,
                               "seeds": [secrets.randbits(62) for _ in range(TIMING_INPUT_SETS)]}, READY_TIMEOUT_S)
        run.check_reply(cal.header, step, "calibrate")
        t_cal = time.monotonic()
        cal = session.request({"op": "calibrate_loop", "reps": CALIBRATION_REPS}, READY_TIMEOUT_S)
        run.check_reply(cal.header, step, "calibrate_loop")
        loop_overhead_ms = (time.monotonic() - t_cal) * 1e3 / CALIBRATION_REPS

        step = "import of the candidate"
        t0 = time.monotonic()
        loaded = session.request({"op": "load"}, config.compile_timeout_s)
        run.check_reply(loaded.header, step, "load")
        stages["load"] = time.monotonic() - t0

        t0 = time.monotonic()
        index = 0
        for distribution in task.distributions:
            for _ in range(config.trials_per_distribution):
                step = f"trial {index} ({distribution})"
                run.trials.append(run.trial(index, shape, distribution))
                index += 1
        stages["correctness"] = time.monotonic() - t0
        failed = [t for t in run.trials if not t.passed]
        if failed:
            first = failed[0]
            raise _Stop(Status.INCORRECT, f"{len(failed)} of {len(run.trials)} trials failed; first: trial {first.trial} "
                        f"({first.distribution} inputs, shape {first.shape}, seed {first.seed}): {first.message}")
        if task.requires_custom_kernel and not run.custom_evidence:
            raise _Stop(Status.POLICY_VIOLATION, "forward() ran no code the candidate compiled: this task requires a "
                        "custom kernel (a load_inline extension or a Triton kernel), not only PyTorch operators",
                        rule="custom_kernel_required")

        step = "timing"
        t0 = time.monotonic()
        # Two input sets refill the same buffers in turn: an answer cached by pointer, shape or call count
        # is wrong for the next call, and every timed call's output is checked.
        seeds = [secrets.randbits(62) for _ in range(TIMING_INPUT_SETS)]
        truths, pool_prints = zip(*(run.truth(shape, official, seed) for seed in seeds))
        est = session.request({"op": "estimate", "shape": list(shape), "distribution": official, "seed": seeds[0]},
                              config.call_timeout_s * 4)
        run.check_reply(est.header, "timing estimate", "estimate")
        estimate_ms = float(est.header.get("estimate_ms", 1.0))
        reps, warmup = plan_reps(estimate_ms, config.timing_budget_ms, config.min_reps, config.max_reps)
        t_wall = time.monotonic()
        timed = session.request({"op": "time", "shape": list(shape), "distribution": official, "seeds": seeds,
                                 "reps": reps, "warmup": warmup},
                                (reps + warmup) * (estimate_ms / 1e3 + 0.05) * 3 + 60)
        wall_ms = (time.monotonic() - t_wall) * 1e3
        run.check_reply(timed.header, step, "time")
        header = timed.header
        outputs = header.get("outputs") or []
        if header.get("rejected_output") or len(outputs) != reps or len(timed.payloads) != reps:
            raise _Stop(Status.INCORRECT, f"timed calls: {header.get('rejected_output') or 'missing outputs'}")
        for i, (meta, payload) in enumerate(zip(outputs, timed.payloads)):
            out = run.output(meta, [payload], f"timed call {i}")
            cmp = compare(out, truths[i % len(seeds)], task.tolerance.atol, task.tolerance.rtol)
            if not cmp.passed:
                raise _Stop(Status.INCORRECT, f"timed call {i} returned a wrong result ({cmp.message}): results "
                            "must be computed on every call from that call's inputs, not cached or deferred")
        if header.get("after") != pool_prints[int(header.get("pool_index", 0)) % len(seeds)]:
            raise _Stop(Status.INCORRECT, "the timed calls modified their inputs in place")
        times = [float(t) for t in header.get("times_ms", [])]
        if len(times) != reps:
            raise _Stop(Status.TAMPER_DETECTED, f"asked for {reps} timed calls, the child reported {len(times)}",
                        rule="timing")
        stats = TimingStats(**summarize(times))
        # The parent's own clock bounds what the child may claim: calls = reps + warmup, each at least
        # (wall / calls - loop overhead) long. Claims under half of that are forged.
        per_call_floor = wall_ms / (reps + warmup) - loop_overhead_ms
        if stats.median_ms < 0.5 * per_call_floor - (0.05 + 0.1 * loop_overhead_ms):
            raise _Stop(Status.TAMPER_DETECTED, f"the reported time ({stats.median_ms:.4f} ms) is far below what the "
                        f"judge's own clock measured (at least {per_call_floor:.4f} ms per call)", rule="timing")
        stages["timing"] = time.monotonic() - t0
        perf = _performance(task, shape, stats, baselines, header)
        verdict_fields["performance"] = perf
        details["timing"] = {"batch_wall_ms": header.get("batch_wall_ms"), "untimed_per_call_ms": header.get("untimed_ms"),
                             "judge_wall_ms": wall_ms, "warmup": warmup, "hidden_work": bool(header.get("hidden_work"))}
        diagnosis = _summary(stats, perf)
        if header.get("hidden_work"):
            diagnosis += ("; device work ran where the timing events do not look (another stream or thread), so each "
                          "call was timed by the host clock between device-wide synchronisations")

        if config.check_extra_shapes:
            step = "extra shapes"
            t0 = time.monotonic()
            extras: list[TrialResult] = []
            verdict_fields["extra_shapes"] = extras
            for i, extra_shape in enumerate(extra_shapes):
                try:
                    extras.append(run.trial(i, tuple(extra_shape), official, extra=True))
                except _Stop as stop:
                    if stop.status in (Status.POLICY_VIOLATION, Status.TAMPER_DETECTED):
                        raise
                    extras.append(TrialResult(trial=i, distribution=official, shape=list(extra_shape), seed=0,
                                              passed=False, message=stop.diagnosis))
                    break  # the child stops after an error; the remaining shapes are not run
            stages["extra_shapes"] = time.monotonic() - t0
            bad = [e for e in extras if not e.passed]
            if bad:
                diagnosis += (f"; fails {len(bad)} of {len(extra_shapes)} extra shapes (reported, not part of the "
                              f"verdict): first {bad[0].shape}: {bad[0].message}")
    except _Stop as stop:
        status, diagnosis, details = stop.status, stop.diagnosis, {**details, **stop.details}
    except ChildFailure as failure:
        status, diagnosis = _failure_verdict(failure, step)
        details["failure"] = failure.kind
        if step in PRE_CANDIDATE_STEPS:
            # No candidate code had run yet: the sandbox or the machine failed, not the candidate.
            status, diagnosis = Status.SYSTEM_ERROR, f"the judge's child failed before loading the candidate: {diagnosis}"
    except isolation.IsolationError as exc:
        status, diagnosis = Status.SYSTEM_ERROR, f"the sandbox could not start: {exc}"
    finally:
        if session is not None:
            session.close()
        shutil.rmtree(work_dir, ignore_errors=True)
    return Verdict(status=status, diagnosis=diagnosis, stages=stages, trials=run.trials if run else [],
                   details=details, **verdict_fields, **base)


def _performance(task: Task, shape: tuple[int, ...], stats: TimingStats, baselines: dict, header: dict) -> Performance:
    base_stats = {name: TimingStats(**values) for name, values in baselines.get("baselines", {}).items()}
    bandwidth = baselines.get("bandwidth_bytes_per_s")
    min_bytes = task.min_bytes(shape)
    sol = (min_bytes / bandwidth * 1e3) / stats.median_ms if bandwidth else None
    peak = header.get("peak_memory_bytes")
    return Performance(
        candidate=stats,
        baselines=base_stats,
        speedups={name: b.median_ms / stats.median_ms for name, b in base_stats.items()},
        min_bytes=min_bytes,
        bandwidth_bytes_per_s=bandwidth,
        speed_of_light_fraction=sol,
        peak_memory_bytes=int(peak) if isinstance(peak, (int, float)) else None,
        reference_peak_memory_bytes=baselines.get("reference_peak_memory_bytes"),
    )


def _summary(stats: TimingStats, perf: Performance) -> str:
    parts = [f"correct: {stats.median_ms:.4f} ms median (IQR {stats.q25_ms:.4f}-{stats.q75_ms:.4f}, {stats.reps} runs)"]
    parts += [f"{s:.2f}x vs {name}" for name, s in perf.speedups.items()]
    if perf.speed_of_light_fraction is not None:
        parts.append(f"{100 * perf.speed_of_light_fraction:.0f}% of speed-of-light")
    return ", ".join(parts)


def judge(task_id: str, raw_source: str, device: str = "cpu", *, config: JudgeConfig | None = None) -> Verdict:
    """prepare + execute."""
    target = "cpu" if torch.device(device).type == "cpu" else "cuda"
    prepared = prepare(task_id, raw_source, target=target, config=config)
    if isinstance(prepared, Verdict):
        return prepared
    return execute(prepared, device, config=config)
