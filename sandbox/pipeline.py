"""The judging pipeline: extract -> static checks -> compile -> isolated run (correctness, timing) -> Verdict.

`prepare` (here) is CPU-only work (the service runs it in a compile pool); `execute`
(sandbox/execute.py) needs the device and runs one candidate at a time on it. Every way a candidate can
fail ends in a `Verdict`; only a failure
of the judge's own machinery ends in `system_error`.
"""

from __future__ import annotations

import hashlib
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from reference import Task, get_task
from sandbox import build_advice
from sandbox import compile as build
from sandbox import isolation
from sandbox import protocol as msg
from sandbox.config import JudgeConfig
from sandbox.execute import execute
from sandbox.extract import ExtractionError, extract_candidate
from sandbox.static_checks import check_source
from sandbox.supervisor import ChildFailure, ChildSession
from sandbox.verdict import Status, Verdict

__all__ = ["PreparedCandidate", "execute", "judge", "prepare"]


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
    build_advice: str | None = None
    """How to make this candidate's build fast, when its .cu or main.cpp needed torch's full headers
    (sandbox/build_advice.py)."""


def _sha256(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def _verdict(status: Status, diagnosis: str, task_id: str, device: str, source_sha: str, **kw: Any) -> Verdict:
    return Verdict(status=status, diagnosis=diagnosis, task=task_id, device=device, source_sha256=source_sha, **kw)


# --- prepare: extract, check, compile ------------------------------------------------------------

def prepare(task_id: str, raw_source: str, *, target: str = "cpu",
            config: JudgeConfig | None = None) -> PreparedCandidate | Verdict:
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
                             stages=stages, compile_log=log, compile_cached=result.cached,
                             build_advice=build_advice.advice(result.log, result.seconds))


def _run_build(task: Task, build_dir: Path, target: str, config: JudgeConfig) -> build.BuildResult:
    """Import the candidate in a GPU-less isolated child so its extensions build into build_dir."""
    extra = {"TORCH_CUDA_ARCH_LIST": build.cuda_arch_list(), "CUDA_VISIBLE_DEVICES": ""} if target == "cuda" else {}
    started = time.monotonic()
    accel_env, accel_binds = build.accelerators(config, target, (build_dir / build.SOURCE_FILE).read_text())
    extra.update(accel_env)
    session = ChildSession("compile", task.id.value, "cpu", build_dir, config, gpu=False, extra_env=extra,
                           extra_binds=accel_binds,
                           wall_s=config.compile_timeout_s + 30)
    try:
        reply = session.receive(config.compile_timeout_s)
    except ChildFailure as failure:
        timed_out = failure.kind == "timeout"
        return build.BuildResult(ok=False, build_failed=False, log=failure.stderr, seconds=time.monotonic() - started,
                                 error={"type": failure.kind, "message": str(failure)}, timed_out=timed_out)
    finally:
        session.close()
    log = session.stderr()
    try:
        header = msg.parse_reply(reply.header, msg.BuildReply)
    except msg.ProtocolError as exc:
        return build.BuildResult(ok=False, build_failed=False, log=log, seconds=time.monotonic() - started,
                                 error={"type": "protocol", "message": f"the build child broke the protocol: {exc}"})
    error = header.error.model_dump() if header.error else None
    if error:
        log = f"{error['message']}\n{log}"
    return build.BuildResult(ok=header.ok, build_failed=header.build_failed, log=log,
                             seconds=time.monotonic() - started, error=error, tripwire_hits=tuple(header.tripwire_hits))


def judge(task_id: str, raw_source: str, device: str = "cpu", *, config: JudgeConfig | None = None) -> Verdict:
    """prepare + execute."""
    target = "cpu" if torch.device(device).type == "cpu" else "cuda"
    prepared = prepare(task_id, raw_source, target=target, config=config)
    if isinstance(prepared, Verdict):
        return prepared
    return execute(prepared, device, config=config)
