"""Profile a built candidate: ncu wrapping its own sandboxed child, on official inputs, after the verdict.

Trusted code (the judge's side). The sandbox is the execution child's (sandbox/isolation.py through the
helpers of sandbox/supervisor.py): the candidate's build directory at /build, its judged source read-only, the
judge's packages read-only, the GPU nodes, no network, the same memory, process and output limits, a wall
limit of its own (`time_limit_s`). Inside it, ncu runs `python -m sandbox.child.profiled` and writes its raw
CSV to a file in /build, which the parent reads without following links (the candidate could have left a link
to a host file there) and bounded in size, then parses (sandbox/profiling/report.py).

A profile never touches a verdict: it runs after one, in a child of its own, and its device time is returned
(`Profile.gpu_seconds`) for the caller to account apart from the judging's.
"""

from __future__ import annotations

import os
import stat
import sys
import uuid
from pathlib import Path

import torch

from sandbox import isolation, sandboxed_process
from sandbox.environment import device_name
from sandbox.pipeline import PreparedCandidate
from sandbox.profiling import ncu as _ncu
from sandbox.profiling.report import MAX_CSV_BYTES, Profile, ProfileParseError, parse_raw_csv
from sandbox.supervisor import SOURCE_MOUNT, ChildPaths, child_env, code_binds
from sandbox.config import JudgeConfig
from sandbox.verdict import Verdict

CALLS = 3
"""Profiled forward calls: enough to show a kernel that runs only on some calls, few enough to stay quick."""
TIME_LIMIT_S = 240.0
"""The profiled child's wall limit when nothing is known of the candidate's speed, and the most any profile gets:
ncu's start (~10 s), the candidate's import and a warm-up call, and each of up to LAUNCH_LIMIT launches replayed a
few times (milliseconds each for these tasks)."""
BASE_S = 60.0
"""What a profile takes whatever the kernel's speed: ncu's start (~10 s on an H100), the candidate's import (the
judge allows it JudgeConfig.load_timeout_s, 30 s) and its warm-up call."""
REPLAY_ALLOWANCE = 50
"""Forward calls' worth of time allowed per profiled call: ncu replays each kernel once per pass its metrics need
(a few for METRICS) and saves and restores device memory around each replay."""
STDERR_LINES = 8
"""Of the child's output, the last lines a failed profile quotes."""
_TRUSTED_ROOTS = (Path("/usr"), Path("/opt/nvidia"))
"""Bound whole into every bubblewrap sandbox already (sandbox/isolation.py): an ncu there needs no bind."""


def unavailable(reason: str, device: str | None = None) -> Profile:
    return Profile(status="unavailable", reason=reason, device=device)


def _read_log(build_dir: Path, name: str) -> str | None:
    """The log ncu wrote at build_dir/name: a regular file, read without following a link, at most
    MAX_CSV_BYTES + 1 bytes (the parser refuses more); None where there is none."""
    dir_fd = os.open(build_dir, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
    try:
        fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK, dir_fd=dir_fd)
    except OSError:
        return None
    finally:
        os.close(dir_fd)
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None
        data = os.read(fd, MAX_CSV_BYTES + 1)
    finally:
        os.close(fd)
    return data.decode("utf-8", "replace")


def _binds(ncu: str, mechanism: str, source: Path) -> dict[Path, str]:
    binds = {**code_binds(), source: SOURCE_MOUNT} if mechanism == "bwrap" else {}
    where = _ncu.install_dir(ncu)
    if mechanism == "bwrap" and not any(where.is_relative_to(root) for root in _TRUSTED_ROOTS):
        binds[where] = str(where)
    return binds


def _tail(text: str) -> str:
    lines = [line for line in text.splitlines() if line.strip() and not line.startswith("==PROF==")]
    return "\n".join(lines[-STDERR_LINES:])


def time_limit_s(verdict: Verdict | None, calls: int = CALLS) -> float:
    """The profiled child's wall limit from what the verdict measured of one forward call: the device is held for
    the profile, so a candidate that runs slowly only under the profiler holds it for about its own time, not for
    TIME_LIMIT_S. The timed calls' upper quartile when the verdict has one; else a correctness trial's share of its
    stage (the child's call, the transfers and the comparison: more than the call); else TIME_LIMIT_S."""
    if verdict is None:
        return TIME_LIMIT_S
    if verdict.performance is not None:
        call_s = verdict.performance.candidate.q75_ms / 1e3
    elif verdict.trials and verdict.stages.get("correctness"):
        call_s = verdict.stages["correctness"] / len(verdict.trials)
    else:
        return TIME_LIMIT_S
    return min(TIME_LIMIT_S, BASE_S + REPLAY_ALLOWANCE * (calls + 1) * call_s)


def profile_candidate(prepared: PreparedCandidate, device: str, *, config: JudgeConfig | None = None,
                      calls: int = CALLS, launch_limit: int = _ncu.LAUNCH_LIMIT,
                      time_limit_s: float = TIME_LIMIT_S, ncu: str | None = None, seed: int | None = None,
                      log_copy: Path | None = None) -> Profile:
    """Run the candidate's kernels under ncu in a sandbox of their own; the profile, or why there is none.

    `ncu`: the profiler's path (default: `ncu.find_ncu()`). Without one named, a CPU device gives "not
    available on this host" at once: profiles are taken on GPU hosts. `log_copy`: where to keep ncu's log as
    it was read (scripts/gpu/profile_capture.py records fixtures with it)."""
    config = config or JudgeConfig()
    gpu = torch.device(device).type == "cuda"
    if ncu is None:
        if not gpu:
            return unavailable("not available on this host: profiles are taken on GPU hosts, and this worker "
                               "judges on the CPU", device)
        ncu = _ncu.find_ncu()
        if ncu is None:
            return unavailable("not available on this host: Nsight Compute (ncu) is not installed here "
                               f"(or set {_ncu.NCU_ENV})", device)
    try:
        mechanism = isolation.available_mechanism(config.isolation)
    except isolation.IsolationError as exc:
        return unavailable(f"not available on this host: no sandbox to profile in ({exc})", device)
    paths = ChildPaths.for_mechanism(mechanism, prepared.build_dir)
    source = SOURCE_MOUNT if mechanism == "bwrap" else str(prepared.source_path)
    log_name = f"ncu-profile-{uuid.uuid4().hex}.csv"
    target = [sys.executable, "-B", "-m", "sandbox.child.profiled", "--task", prepared.task_id, "--device", device,
              "--source", source, "--calls", str(calls),
              "--seed", str(seed if seed is not None else int.from_bytes(os.urandom(4), "little"))]
    spec = isolation.SandboxSpec(
        argv=_ncu.ncu_argv(ncu, f"{paths.build}/{log_name}", target, launch_limit=launch_limit),
        env=child_env(config, paths, {"JUDGE_PRIVATE_PIDS": "1" if mechanism != "none" else "0"}),
        writable_dir=prepared.build_dir, readonly_binds=_binds(ncu, mechanism, prepared.source_path), gpu=gpu,
        limits=isolation.Limits(wall_s=time_limit_s, memory_bytes=config.memory_limit_bytes,
                                max_pids=config.max_pids, output_bytes=config.output_limit_bytes,
                                tmp_bytes=config.disk_limit_bytes, file_size_bytes=config.disk_limit_bytes),
        cwd=paths.build)
    completed = sandboxed_process.run(spec, mechanism)
    try:
        log = _read_log(prepared.build_dir, log_name)
    finally:
        try:
            os.unlink(prepared.build_dir / log_name)
        except OSError:
            pass
    if log_copy is not None and log is not None:
        log_copy.write_text(log)
    base = dict(device=device, device_name=device_name(device) if gpu else None, ncu_version=_ncu.ncu_version(ncu),
                calls=calls, launch_limit=launch_limit, gpu_seconds=completed.duration_s if gpu else 0.0)
    return _outcome(completed, log, base, time_limit_s)


def _outcome(completed: sandboxed_process.Completed, log: str | None, base: dict, time_limit_s: float) -> Profile:
    """The Profile a finished run gives: its kernels, or why there are none."""
    output = completed.stdout + "\n" + completed.stderr
    if completed.timed_out:
        return Profile(status="failed", reason=f"the profiled run passed its {time_limit_s:.0f} s limit", **base)
    if log is None:
        why = _tail(output) or f"exit status {completed.returncode}"
        return Profile(status="failed", reason=f"ncu wrote no report: {why}", **base)
    try:
        parsed = parse_raw_csv(log)
    except ProfileParseError as exc:
        return Profile(status="failed", reason=f"ncu's report could not be read: {exc}", **base)
    if parsed.counters_refused:
        return Profile(status="unavailable", reason="not available on this host: the GPU's performance counters "
                       "are reserved for administrators (NVreg_RestrictProfilingToAdminUsers=1)", **base)
    if completed.returncode != 0 and not parsed.kernels:
        why = _tail(output) or "; ".join(parsed.errors) or f"exit status {completed.returncode}"
        return Profile(status="failed", reason=f"the profiled run failed: {why}", warnings=parsed.warnings, **base)
    warnings = list(parsed.warnings) + parsed.errors
    if completed.returncode != 0:
        warnings.append(f"the profiled run ended with status {completed.returncode}: {_tail(output)}")
    return Profile(status="ok", launches=parsed.launches, kernels=parsed.kernels, warnings=warnings[:8], **base)
