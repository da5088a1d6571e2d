"""The judging pipeline: extract -> static checks -> compile -> isolated run (correctness, timing) -> Verdict.

`prepare` (here) is CPU-only work (the service runs it in a compile pool); `execute`
(sandbox/execution/run.py) needs the device and runs one candidate at a time on it. Every way a candidate can
fail ends in a `Verdict`; only a failure
of the judge's own machinery ends in `system_error`.
"""

from __future__ import annotations

import hashlib
import json
import re
import time
from dataclasses import replace
from pathlib import Path
from collections.abc import Callable
from typing import Any

import torch

from reference import Task, TaskId, get_task
from sandbox.build import advice as build_advice
from sandbox.build import blame
from sandbox.build import compiler
from sandbox.build import errors as compile_errors
from sandbox.build.stall import StallWatch
from sandbox import isolation
from sandbox import protocol as msg
from sandbox import static_checks
from sandbox.candidate import PreparedCandidate
from sandbox.config import JudgeConfig
from sandbox.execution.run import execute as execute_once
from sandbox.execution.spares import WarmChild
from sandbox.extract import ExtractionError, extract_candidate
from sandbox.shared.languages import JIT_SHAPES_ENV
from sandbox.stages import timed
from sandbox.static_checks import check_source
from sandbox.supervisor import ChildFailure, ChildResult, ChildSession
from sandbox.verdict import CompileError, Status, Verdict

__all__ = ["PreparedCandidate", "execute", "judge", "prepare"]


def _sha256(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def _verdict(status: Status, diagnosis: str, task_id: TaskId, device: str, judged_sha256: str, **kw: Any) -> Verdict:
    """`judged_sha256`: the extracted code's hash, or the text's where no code could be extracted."""
    return Verdict(status=status, diagnosis=diagnosis, task=task_id, device=device, judged_sha256=judged_sha256, **kw)


# --- prepare: extract, check, compile ------------------------------------------------------------

def prepare(task_id: TaskId | str, raw_source: str, *, target: str = "cpu",
            config: JudgeConfig | None = None) -> PreparedCandidate | Verdict:
    """CPU-only stage. Returns a Verdict (compile_error, policy_violation, ...) when the candidate is rejected.

    `task_id`: a TaskId, or the id as sent ("kl_div"): `get_task` reads either, and refuses an unknown one."""
    config = config or JudgeConfig()
    task = get_task(task_id)
    stages: dict[str, float] = {}
    # A rejection is built inside its stage's block: it carries the stages before that one (sandbox/stages.py).
    with timed(stages, "extract"):
        text_sha256 = _sha256(raw_source)
        try:
            source = extract_candidate(raw_source)
        except ExtractionError as exc:
            return _verdict(Status.COMPILE_ERROR, f"no candidate found: {exc}", task.id, target, text_sha256,
                            details={"stage": "extract"})
        code_sha256 = _sha256(source)
    with timed(stages, "static_checks"):
        try:
            report = check_source(source, task.forbidden_python_names, task.forbidden_aten_ops)
        except SyntaxError as exc:
            return _verdict(Status.COMPILE_ERROR, f"Python syntax error at line {exc.lineno}: {exc.msg}",
                            task.id, target, code_sha256, stages=stages,
                            details={"stage": "static_checks", "line": exc.lineno})
    common = dict(stages=stages, imports=report.imports)
    policy = [f for f in report.findings if f.rule in ("forbidden_operator", "judge_import")]
    if policy:
        first = policy[0]
        return _verdict(Status.POLICY_VIOLATION, f"line {first.line}: {first.message}", task.id, target,
                        code_sha256,
                        details={"stage": "static_checks", "rule": first.rule,
                                 "findings": [f.__dict__ for f in report.findings]}, **common)
    if report.findings:
        return _verdict(Status.COMPILE_ERROR, report.findings[0].message, task.id, target, code_sha256,
                        details={"stage": "static_checks", "rule": report.findings[0].rule}, **common)
    return _compile(task, raw_source, source, code_sha256, target, config, common)


def _compile(task: Task, raw_source: str, source: str, code_sha256: str, target: str, config: JudgeConfig,
             common: dict[str, Any]) -> PreparedCandidate | Verdict:
    """`prepare`'s compile stage: the key's stored build, or a fresh one; a rejection's verdict, or the candidate.
    `common`: the stages so far and the imports, which every verdict from here carries."""
    stages = common["stages"]
    chain, key = key_of(task, source, target, config)
    paths = compiler.KeyPaths.of(config.build_root, key)
    with timed(stages, "compile"):
        try:
            result = _build_once(task, paths, source, target, config)
        except OSError as exc:  # the cache disk (full, read-only): ours, and nothing is stored
            return _verdict(Status.SYSTEM_ERROR, f"the build cache could not be written: {exc}", task.id, target,
                            code_sha256, details={"stage": "compile", **compiler.infrastructure_kind(str(exc))},
                            **common)
    pch_note = build_advice.pch_note(result.pch_building_s, stages["compile"])
    if pch_note:  # its own stage, so that the compile's seconds are the candidate's
        stages["pch_build"] = result.pch_building_s
        stages["compile"] -= result.pch_building_s
    log = compiler.trim_log(result.log if pch_note is None else f"[judge] {pch_note}\n{result.log}")
    fields = dict(toolchain=chain, compile_log=log, **common)
    rejected = _rejection(result, task.id, target, code_sha256, config, fields,
                          sent_offset=_sent_offset(raw_source, source), pch_note=pch_note)
    if rejected is not None:
        return rejected
    return PreparedCandidate(task_id=task.id, source=source, code_sha256=code_sha256, build_key=key,
                             build_dir=paths.build, source_path=paths.source, toolchain=chain, target=target,
                             imports=common["imports"], stages=stages, compile_log=log, compile_cached=result.cached,
                             build_id=result.build_id, build_advice=build_advice.advice(result.log, result.seconds))


def key_of(task: Task, source: str, target: str, config: JudgeConfig) -> tuple[str, str]:
    """The toolchain string and the build key of the extracted `source` built for `target` on this host: what
    `prepare` builds under, and what a build made elsewhere must match to be used here (sandbox/artifacts.py)."""
    chain = compiler.toolchain(target)
    if config.isolation in ("unshare", "none"):
        # ninja records the paths a build ran at: /build under bubblewrap, the host's directory under the weaker
        # mechanisms. A build made under one is not up to date under the other, and the execution child never
        # builds (sandbox/child/no_build.py), so the two must not share a build.
        chain += f"; built at host paths ({config.isolation})"
    return chain, compiler.build_key(source, chain, compiler.build_inputs(target, _build_env(task, target)))


def _build_env(task: Task, target: str) -> dict[str, str]:
    """What the judge adds to the build child's environment besides the accelerators: the architectures a CUDA
    build targets, no device, and the shapes the JIT languages compile for. Part of the build key."""
    extra = {"TORCH_CUDA_ARCH_LIST": compiler.cuda_arch_list(), "CUDA_VISIBLE_DEVICES": ""} if target == "cuda" else {}
    shapes = [task.official_shape, *task.extra_shapes] if target == "cuda" else [task.cpu_shape, *task.cpu_extra_shapes]
    extra[JIT_SHAPES_ENV] = json.dumps([list(shape) for shape in shapes])  # what the JIT languages compile for
    return extra


def _build_once(task: Task, paths: compiler.KeyPaths, source: str, target: str,
                config: JudgeConfig) -> compiler.BuildResult:
    """This key's stored outcome, or a fresh build's, stored when it is the candidate's own. One builder per
    key at a time (the lock); the parent never follows anything the build left in paths.build."""
    accel = compiler.accelerator_config(config, target)
    with compiler.build_lock(config.build_root, paths.key_dir.name):
        stored = compiler.load_result(paths, accel)
        if stored is not None:
            return stored
        compiler.start_build(paths, source)
        result = _run_build(task, paths, target, config)
        if result.storable:
            refused = compiler.audit(paths.build)
            if refused:
                compiler.clear_build(paths.build)
                result = replace(result, refused=refused)
            else:
                compiler.place_source(paths)
                if result.build_failed:  # read while the build directory is as the build left it
                    placed = compile_errors.place(result.log, source, paths.build)
                    result = replace(result, compile_errors=tuple(e.model_dump() for e in placed))
            result = compiler.store_result(paths, result, accel)
        else:  # not stored (the host's failure, a timeout), nor left taking space (a full disk's partial objects)
            compiler.clear_build(paths.key_dir)
        return result


def _rejection(result: compiler.BuildResult, task_id: TaskId, target: str, code_sha256: str, config: JudgeConfig,
               fields: dict[str, Any], sent_offset: int | None = None, pch_note: str | None = None) -> Verdict | None:
    """The verdict of a build that ends the candidate's judging here, or None when it goes on to execution.
    `sent_offset`: lines of the text as sent before the judged module (a completion's prose), for the errors'
    `sent_line`; `pch_note`: what building the host's shared headers added to this build's time."""
    if result.infrastructure:
        stall = {"stall": result.stall} if result.stall else {}
        return _verdict(Status.SYSTEM_ERROR, f"the build failed for reasons of the judge's: {result.infrastructure}",
                        task_id, target, code_sha256, details={"stage": "compile",
                                                               "infrastructure": result.infrastructure, **stall,
                                                               **compiler.infrastructure_kind(result.infrastructure)},
                        **fields)
    if result.broken_protocol:
        return _verdict(Status.COMPILE_ERROR, "the build stage's result channel carried a message that is not the "
                        f"judge's ({result.broken_protocol}): code that ran while the candidate was imported wrote on "
                        "the judge's pipe, or ended the process in the middle of its answer", task_id, target,
                        code_sha256, details={"stage": "compile", "rule": "protocol"}, **fields)
    if result.refused:
        return _verdict(Status.POLICY_VIOLATION, f"the build left {result.refused}: a build directory may hold only "
                        "regular files and directories", task_id, target, code_sha256,
                        details={"stage": "compile", "rule": "build_directory"}, **fields)
    if result.tripwire_hits:
        return _verdict(Status.POLICY_VIOLATION, f"called {result.tripwire_hits[0]} while being imported",
                        task_id, target, code_sha256, details={"stage": "compile", "rule": "forbidden_operator",
                                                       "calls": list(result.tripwire_hits)}, **fields)
    if result.timed_out:
        return _verdict(Status.TIMEOUT, f"compilation did not finish within {config.compile_timeout_s:.0f} s",
                        task_id, target, code_sha256, details={"stage": "compile"}, **fields)
    missing = _missing_module(result)
    if missing:
        return _verdict(Status.COMPILE_ERROR, f"importing the candidate failed: no module named {missing!r} on this "
                        f"judge. This host judges: {'; '.join(static_checks.supported_languages())}.", task_id,
                        target, code_sha256, details={"stage": "compile", "rule": "import_failed", "module": missing},
                        **fields)
    if result.build_failed:
        errors = compiler.first_errors(result.log)
        placed = [CompileError.model_validate(e) for e in result.compile_errors]
        for error in placed:
            if error.file_line is not None and sent_offset is not None:
                error.sent_line = error.file_line + sent_offset
        lines = [compile_errors.diagnosis_line(e) for e in placed[:5]] or errors
        head = "\n".join(lines) if lines else (result.error or {}).get("message", "")[:2000]
        tail = f"\n{pch_note}" if pch_note else ""
        return _verdict(Status.COMPILE_ERROR, f"the extension failed to compile:\n{head}{tail}", task_id, target,
                        code_sha256,
                        details={"stage": "compile", "errors": errors}, compile_errors=placed, **fields)
    return None


def _sent_offset(raw_source: str, source: str) -> int | None:
    """Lines of the text as sent before the judged module (0 for a bare module), or None if it is not found
    verbatim (extract.py takes a code block's lines as they are, so it always is)."""
    at = raw_source.rfind(source)
    return raw_source.count("\n", 0, at) if at >= 0 else None


_NO_MODULE = re.compile(r"No module named '([^']+)'")


def _missing_module(result: compiler.BuildResult) -> str | None:
    """The module whose absence failed the build child's import, when it is certain to fail the execution child
    too (same interpreter and site-packages): checked in this trusted process. Any other import failure may come
    from the build child having no device and is judged where it happens again."""
    error = result.error or {}
    if result.ok or result.build_failed or error.get("type") not in ("ModuleNotFoundError", "ImportError"):
        return None
    named = _NO_MODULE.search(error.get("message", ""))
    if named is None or static_checks.importable(named.group(1)):
        return None
    return named.group(1)


def _run_build(task: Task, paths: compiler.KeyPaths, target: str, config: JudgeConfig) -> compiler.BuildResult:
    """Import the candidate in a GPU-less isolated child so its extensions build into paths.build. A failure of
    the sandbox, the child or the host comes back as `infrastructure`, never as the candidate's outcome."""
    extra = _build_env(task, target)
    source = paths.source.read_text()
    started = time.monotonic()
    try:
        offer = compiler.offer_accelerators(config, target, source)
    except isolation.IsolationError as exc:  # (the offer asks which sandbox runs: none may work on this host)
        return compiler.BuildResult(ok=False, build_failed=False, log="", seconds=time.monotonic() - started,
                                 infrastructure=f"the build sandbox could not start: {exc}")
    result = _build_child(task, paths, config, {**extra, **offer.env}, offer.binds, started)
    named = blame.accelerators_named((result.error or {}).get("message", "")) if result.build_failed else None
    if named and (offer.env or offer.binds):
        # The message names the judge's accelerators (torch's message holds the last ninja run's output: the build
        # hooks' own retries without them came before it). Whether they were in the way is not the candidate's text
        # to say (sandbox/build/blame.py): built once more with none offered, that build's outcome is the candidate's.
        compiler.empty_build_dir(paths)
        result = _build_child(task, paths, config, extra, {}, started)
        result = replace(result, log=f"{REBUILT_NOTE} ({named!r})\n{result.log}")
    compiler.want_full_pch(config, target, source, result.log)
    return replace(result, pch_building_s=offer.pch_building_s)


REBUILT_NOTE = "[judge] built again with none of the judge's accelerators offered: the first build's errors named them"
"""The first line of the log of a build made again without accelerators (`_run_build`)."""


def _build_child(task: Task, paths: compiler.KeyPaths, config: JudgeConfig, extra: dict[str, str],
                 binds: dict[Path, str], started: float) -> compiler.BuildResult:
    """`_run_build`'s child: started with the accelerators' environment and binds, its outcome read."""

    def ours(why: str, log: str = "", error: dict | None = None) -> compiler.BuildResult:
        return compiler.BuildResult(ok=False, build_failed=False, log=log, seconds=time.monotonic() - started,
                                 error=error, infrastructure=why)

    oom_kills_before = blame.host_oom_kills()
    try:
        session = ChildSession("compile", task.id, "cpu", paths.build, config, gpu=False, extra_env=extra,
                               extra_binds=binds, source=paths.source, wall_s=config.compile_timeout_s + 30)
    except (isolation.IsolationError, OSError) as exc:
        return ours(f"the build sandbox could not start: {exc}")
    watch = StallWatch(session.process)
    try:
        reply = session.receive(config.compile_timeout_s)
    except ChildFailure as failure:
        return _failed_build(failure, watch, started, ours, _evidence(session, paths, oom_kills_before))
    finally:
        watch.stop()
        session.close()
    return _build_reply(reply, session.stderr(), started, _evidence(session, paths, oom_kills_before))


def _evidence(session: ChildSession, paths: compiler.KeyPaths, oom_kills_before: int | None) -> blame.HostEvidence:
    """What the parent measured around a build child that has ended (sandbox/build/blame.py)."""
    after = blame.host_oom_kills()
    process = session.process
    return blame.HostEvidence(
        host_oom_kills=after - oom_kills_before if after is not None and oom_kills_before is not None else None,
        limit_reached=process.memory_limit_reached, build_root_free=blame.free_bytes(paths.build))


def _failed_build(failure: ChildFailure, watch: StallWatch, started: float, ours: Callable[..., compiler.BuildResult],
                  evidence: blame.HostEvidence) -> compiler.BuildResult:
    """A build child that ended without its reply: whose failure it was (the host's, the candidate's, the judge's)."""
    error = {"type": failure.kind, "message": str(failure)}
    if failure.kind == "timeout":
        seen = watch.stop()
        if seen.stalled:  # the limit's time went to the host (sandbox/build/stall.py), not to the candidate
            return replace(ours(f"the host stalled the build: {seen.describe()}", failure.stderr, error),
                           stall=seen.to_dict())
        return compiler.BuildResult(ok=False, build_failed=False, log=failure.stderr,
                                 seconds=time.monotonic() - started, error=error, timed_out=True)
    if failure.flooded:
        # Output past the limit from a build is the compiler's errors (torch/extension.h under -std=c++14 gives
        # megabytes) or the candidate's own prints at import: the candidate's outcome either way, judged on
        # the kept start of the log, where the first errors are. Left to the execution child, the killed
        # build's lock file made torch wait there until the load limit, holding the device.
        return compiler.BuildResult(ok=False, build_failed=True, log=failure.stderr,
                                 seconds=time.monotonic() - started, error=error)
    if failure.kind == "protocol":
        # The child's only message is written after the candidate's import ran, in the candidate's process: a
        # garbled or forged frame is the candidate's doing (issue 39), never a retry of the judge's.
        return _broken(str(failure), failure.stderr, started)
    if (failure.kind == "oom" or failure.signal_name == "SIGKILL") and evidence.host_oom:
        # Killed by the host's OOM killer while the build stayed under its own limit: the host ran short, and the
        # build has no outcome to judge. A kill with no such count behind it (the candidate's own SIGKILL at import,
        # its own memory limit reached) is the candidate's, below (sandbox/build/blame.py).
        return ours(f"the build child failed: {failure}", failure.stderr, error)
    if failure.kind == "oom":  # its own limit: what it compiled (or allocated at import) needs more, every time
        return compiler.BuildResult(ok=False, build_failed=True, seconds=time.monotonic() - started, error=error,
                                    log=f"the build exceeded the sandbox's memory limit ({failure})\n{failure.stderr}")
    # It exited, or faulted, while importing the candidate: the candidate's doing, judged where it happens
    # again, in the execution child (an exit at import is tampering; a crash, a runtime error).
    return compiler.BuildResult(ok=False, build_failed=False, log=failure.stderr,
                                seconds=time.monotonic() - started,
                             error=error)


def _build_reply(reply: ChildResult, log: str, started: float, evidence: blame.HostEvidence) -> compiler.BuildResult:
    """The build child's `BuildReply`, read: its outcome, with its error first in the log; the host's failure only
    where `evidence` confirms what the message names."""
    try:
        header = msg.parse_reply(reply.header, msg.BuildReply)
    except msg.ProtocolError as exc:
        return _broken(str(exc), log, started)
    error = header.error.model_dump() if header.error else None
    if error:
        log = f"{error['message']}\n{log}"
    why = blame.infrastructure_failure(error["message"], evidence) if error and header.build_failed else None
    return compiler.BuildResult(ok=header.ok, build_failed=header.build_failed, log=log,
                             seconds=time.monotonic() - started, error=error, tripwire_hits=tuple(header.tripwire_hits),
                             infrastructure=why)


def _broken(why: str, log: str, started: float) -> compiler.BuildResult:
    """A build child whose message was not one: the candidate's outcome (`BuildResult.broken_protocol`)."""
    return compiler.BuildResult(ok=False, build_failed=False, log=log, seconds=time.monotonic() - started,
                                error={"type": "protocol", "message": why}, broken_protocol=why)


# --- execute: on the device, once more on a fresh build where a stored one was refused -----------------------

def execute(prepared: PreparedCandidate, device: str, *, config: JudgeConfig | None = None,
            child: WarmChild | None = None) -> Verdict:
    """Run the prepared candidate on `device` (sandbox/execution/run.py `execute`).

    When the execution child refused a stored build (found it not built for the command line it would run,
    sandbox/child/no_build.py), the build was made where the build command differs in something the key does
    not hold (another install or host sharing the build root, a judge of another version): the host's
    difference, never the candidate's verdict. The stored build is forgotten, built again here, and the candidate
    executed once more on a child of its own; only a refusal of a build made in this judging is the candidate's
    compile_error. That rebuild holds the caller's device for a build's length; it is rare, since the key holds
    the versions and paths of the toolchain (sandbox/build/compiler.py `toolchain`, `build_inputs`)."""
    config = config or JudgeConfig()
    verdict = execute_once(prepared, device, config=config, child=child)
    if not (prepared.compile_cached and verdict.details.get("rule") == "not_built"):
        return verdict
    compiler.forget(config.build_root, compiler.KeyPaths(prepared.build_dir.parent), prepared.build_id)
    common = dict(stages=dict(prepared.stages), imports=prepared.imports)
    rebuilt = _compile(get_task(prepared.task_id), prepared.source, prepared.source, prepared.code_sha256,
                       prepared.target, config, common)
    stale = {"refused": verdict.diagnosis[:1000], "rebuilt": isinstance(rebuilt, PreparedCandidate)}
    again = rebuilt if isinstance(rebuilt, Verdict) else execute_once(rebuilt, device, config=config)
    return again.model_copy(update={"details": {**again.details, "stale_build": stale}})


def judge(task_id: TaskId | str, raw_source: str, device: str = "cpu", *, config: JudgeConfig | None = None) -> Verdict:
    """prepare + execute."""
    target = "cpu" if torch.device(device).type == "cpu" else "cuda"
    prepared = prepare(task_id, raw_source, target=target, config=config)
    if isinstance(prepared, Verdict):
        return prepared
    return execute(prepared, device, config=config)
