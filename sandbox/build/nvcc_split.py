"""nvcc for one `.cu`, with its host and device front ends run side by side: the same steps, the same outputs.

Why: nvcc compiles a `.cu` as one chain (docs/results/nvcc-phases-2026-11-25.md): preprocess, cudafe++ (the
host front end), cicc (the device front end), ptxas, fatbinary, then the host compiler. The two front ends
each parse the whole translation unit, torch's headers included, and nothing of one's output is an input of
the other except a module id: cudafe++ writes it when it ends, cicc reads it. cicc can write that id itself
(`--gen_module_id_file`); computed from the same source, the two are the same. So this driver asks the real
nvcc for its steps (`nvcc --dryrun`, the documented list of sub-commands), runs the host lane (host
preprocessing, cudafe++) beside the device lane (device preprocessing, cicc writing its own id, ptxas,
fatbinary), and then the host compile, which needs both. A 17.7 s `.cu` compile (slim headers, 2 cores)
takes ~12.5 s.

What makes the output nvcc's own:
- every command is nvcc's, byte for byte, except the one flag that lets cicc write the module id;
- after both lanes, the two ids are compared; if they differ, the device lane runs again, serially, with
  cudafe++'s id, exactly as nvcc would have run it;
- the dependency file nvcc writes itself (`-- Filter Dependencies --`: every file both preprocessors read) is
  written from the preprocessors' line markers, the same list;
- each step's output is printed in nvcc's order, up to the first step that failed in that order, and the
  driver exits with that step's status, as nvcc does: a compile error reads as nvcc's.
Anything else nvcc is asked to do (several steps of a kind this does not know, a step list it cannot read)
runs the real nvcc unchanged.

Where it runs: the build child's sandbox (sandbox/isolation.py) binds this file, as an executable, over the
toolkit's `bin/nvcc`, and the real toolkit at REAL_ROOT (sandbox/build/compiler.py `accelerators`). build.ninja is
left as torch writes it, so the execution child, which has the real nvcc at that path, finds the `.cu`
object up to date. Trust: it runs as the candidate's own process in its own build and changes only how fast
that build goes; the candidate's outputs are judged at run time as always. Standard library only: it starts
before torch could be imported and must start fast.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

REAL_ROOT = "/judge-cuda"
"""Where the build sandbox binds the real CUDA toolkit (its own `bin/nvcc` is this driver)."""
ROOT_ENV = "JUDGE_NVCC_REAL_ROOT"
"""Overrides REAL_ROOT, and the toolkit's paths are then left as they are: for running this driver outside the
sandbox (tests)."""
_ENV_LINE = re.compile(r"^([A-Za-z_][A-Za-z0-9_]*)=(.*)$")
_DEPS_LINE = re.compile(r"^-- Filter Dependencies -- > (.+)$")
_MODULE_ID = re.compile(r'--module_id_file_name "([^"]+)"')
_LINE_MARKER = re.compile(rb'^# \d+ "((?:[^"\\]|\\.)*)"')
_OUTPUT = re.compile(r'-o "([^"]+)"\s*$')
RECORD_SUFFIX = ".split.json"
"""Beside the object: how long each lane took and whether the ids agreed (scripts/bench/bench_build.py reads it)."""
DRIVER_DIR = "nvcc-split"
"""Under the judge's cache root: this file as an executable, written by `install`."""


@dataclass
class Step:
    command: str
    kind: str  # host_pp, device_pp, cudafe, cicc, device (ptxas, fatbinary, rm), compile
    output: bytes = b""
    returncode: int | None = None


@dataclass
class Plan:
    env: dict[str, str]
    steps: list[Step]  # in nvcc's order
    deps_file: str | None = None
    deps_position: int = 0  # index into steps before which nvcc writes the dependency file
    host_ii: str = ""
    device_ii: str = ""
    module_id_file: str = ""
    errors: list[str] = field(default_factory=list)


def _kind(command: str) -> str | None:
    program = shlex.split(command)[0] if command.strip() else ""
    name = os.path.basename(program)
    if name == "cudafe++":
        return "cudafe"
    if name == "cicc":
        return "cicc"
    if name in ("ptxas", "fatbinary") or program == "rm":
        return "device"
    if " -E " in command and name.endswith(("gcc", "g++", "c++", "cc", "clang", "clang++")):
        return "device_pp" if "-D__CUDA_ARCH__=" in command else "host_pp"
    if " -c " in command and name.endswith(("gcc", "g++", "c++", "cc", "clang", "clang++")):
        return "compile"
    return None


def read_plan(dry_run: str, real_root: str, original_root: str) -> Plan | None:
    """nvcc's `--dryrun` list as a Plan, with the real toolkit's path mapped back to the path nvcc was run at;
    None when it is not the one shape this driver runs in two lanes."""
    env: dict[str, str] = {}
    steps: list[Step] = []
    deps_file, deps_position = None, 0
    for raw in dry_run.splitlines():
        if not raw.startswith("#$ "):
            continue
        line = raw[3:].replace(real_root, original_root)
        found = _ENV_LINE.match(line)
        if found:
            try:
                env[found.group(1)] = " ".join(shlex.split(found.group(2)))
            except ValueError:
                return None
            continue
        deps = _DEPS_LINE.match(line)
        if deps:
            deps_file, deps_position = deps.group(1).strip(), len(steps)
            continue
        kind = _kind(line)
        if kind is None:
            return None
        steps.append(Step(line, kind))
    kinds = [s.kind for s in steps]
    # The shape torch's `.cu` compile has: one of each front end and preprocessor, the host compile last.
    if (kinds.count("cudafe") != 1 or kinds.count("host_pp") != 1 or kinds.count("device_pp") != 1
            or kinds.count("compile") != 1 or kinds[-1] != "compile" or "cicc" not in kinds):
        return None
    cudafe = next(s for s in steps if s.kind == "cudafe")
    module = _MODULE_ID.search(cudafe.command)
    if "--gen_module_id_file" not in cudafe.command or module is None:
        return None
    if any(_MODULE_ID.search(s.command) is None or "--gen_module_id_file" in s.command
           for s in steps if s.kind == "cicc"):
        return None
    host_ii = _OUTPUT.search(next(s for s in steps if s.kind == "host_pp").command)
    device_ii = _OUTPUT.search(next(s for s in steps if s.kind == "device_pp").command)
    if host_ii is None or device_ii is None:
        return None
    return Plan(env=env, steps=steps, deps_file=deps_file, deps_position=deps_position, host_ii=host_ii.group(1),
                device_ii=device_ii.group(1), module_id_file=module.group(1))


def _run(step: Step, env: dict[str, str], command: str | None = None) -> bool:
    if step.kind == "device" and shlex.split(step.command)[0] == "rm":
        # nvcc removes its temporary files itself and ignores one that was never written.
        for name in shlex.split(step.command)[1:]:
            Path(name).unlink(missing_ok=True)
        step.output, step.returncode = b"", 0
        return True
    done = subprocess.run(["/bin/sh", "-c", command or step.command], env=env, stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT)
    step.output, step.returncode = done.stdout, done.returncode
    return done.returncode == 0


def _run_lane(steps: list[Step], env: dict[str, str], commands: dict[int, str]) -> None:
    for step in steps:
        if not _run(step, env, commands.get(id(step))):
            return


def _timed_lane(steps: list[Step], env: dict[str, str], commands: dict[int, str], record: dict, key: str,
                started: float) -> None:
    _run_lane(steps, env, commands)
    record[key] = round(time.monotonic() - started, 2)


def included_files(preprocessed: list[str]) -> list[str]:
    """Every file the preprocessors read, in first-read order, from their line markers: nvcc's dependency list."""
    seen: dict[str, None] = {}
    for path in preprocessed:
        with open(path, "rb") as f:
            for line in f:
                if line.startswith(b"# "):
                    marker = _LINE_MARKER.match(line)
                    if marker:
                        name = marker.group(1).decode("utf-8", "surrogateescape").replace('\\"', '"')
                        if not name.startswith("<"):
                            seen.setdefault(name, None)
    return list(seen)


def write_deps(deps_file: str, target: str, files: list[str]) -> None:
    def escape(name: str) -> str:
        return name.replace("\\", "\\\\").replace(" ", "\\ ").replace("#", "\\#").replace("$", "$$")
    lines = [f"{escape(target)} : {escape(files[0])} \\"] + [f"    {escape(f)} \\" for f in files[1:]]
    Path(deps_file).write_text("\n".join(lines).rstrip(" \\") + "\n\n")


def run_plan(plan: Plan, base_env: dict[str, str]) -> int:
    """Both lanes side by side, then the host compile; prints each step's output in nvcc's order."""
    env = {**base_env, **plan.env}
    own_id = plan.module_id_file + ".device"
    commands: dict[int, str] = {}
    first_cicc = True
    for step in plan.steps:
        if step.kind == "cicc":
            command = step.command.replace(f'--module_id_file_name "{plan.module_id_file}"',
                                           f'--module_id_file_name "{own_id}"')
            if first_cicc:
                command = command.replace("--module_id_file_name", "--gen_module_id_file --module_id_file_name", 1)
                first_cicc = False
            commands[id(step)] = command
    host = [s for s in plan.steps if s.kind in ("host_pp", "cudafe")]
    device = [s for s in plan.steps if s.kind in ("device_pp", "cicc", "device")]
    record: dict = {}
    started = time.monotonic()
    beside = threading.Thread(target=_timed_lane, args=(device, env, commands, record, "device_s", started))
    beside.start()
    _timed_lane(host, env, {}, record, "host_s", started)
    beside.join()
    record["ids_equal"] = _read(own_id) == _read(plan.module_id_file)
    if not _failed(plan.steps) and not record["ids_equal"]:
        # The ids differ: nvcc's own order, the device lane after cudafe++ with its id.
        for step in device:
            step.output, step.returncode = b"", None
        _timed_lane(device, env, {}, record, "device_again_s", time.monotonic())
    target = _OUTPUT.search(plan.steps[-1].command)
    if not _failed(plan.steps):
        if plan.deps_file:
            write_deps(plan.deps_file, target.group(1) if target else "",
                       included_files([plan.device_ii, plan.host_ii]))
        _timed_lane(plan.steps[-1:], env, {}, record, "compile_s", time.monotonic())
        record["total_s"] = round(time.monotonic() - started, 2)
        if target:
            try:
                Path(target.group(1) + RECORD_SUFFIX).write_text(json.dumps(record))
            except OSError:
                pass
    # nvcc's output: each step's, in its order, up to the first that failed. A lane stops at its first
    # failure, so every step that never ran comes after a failed one in that order.
    out = sys.stdout.buffer
    for step in plan.steps:
        if step.returncode is None:
            break
        out.write(step.output)
        if step.returncode != 0:
            out.flush()
            return step.returncode  # nvcc exits with its failed step's status
    out.flush()
    return 0


def _failed(steps: list[Step]) -> bool:
    return any(step.returncode not in (None, 0) for step in steps)


def _read(path: str) -> bytes | None:
    try:
        return Path(path).read_bytes()
    except OSError:
        return None


def _map_deps_file(args: list[str], real_root: str, original_root: str) -> None:
    """The real nvcc at REAL_ROOT names its headers there: name them where the execution child has them."""
    for flag in ("--dependency-output", "-MF"):
        if flag in args[:-1] and real_root != original_root:
            path = Path(args[args.index(flag) + 1])
            try:
                path.write_text(path.read_text().replace(real_root, original_root))
            except OSError:
                pass


def install(cache_root: Path, python: str) -> Path:
    """This file as an executable run by `python` (with -B: the sandbox's root is read-only), under cache_root;
    written once per content."""
    text = f"#!{python} -B\n" + Path(__file__).read_text()
    target = cache_root / DRIVER_DIR / hashlib.sha256(text.encode()).hexdigest()[:16] / "nvcc"
    if not target.exists():
        target.parent.mkdir(parents=True, exist_ok=True)
        partial = target.with_name(f".nvcc.{os.getpid()}")
        partial.write_text(text)
        partial.chmod(0o755)
        partial.replace(target)
    return target


def sandbox_binds(driver: Path, nvcc: Path) -> dict[Path, str]:
    """Read-only binds for the build sandbox: the driver over the toolkit's nvcc, the toolkit at REAL_ROOT."""
    real = nvcc.resolve()
    return {driver: str(real), real.parent.parent: REAL_ROOT}


def main(argv: list[str]) -> int:
    real_root = os.environ.get(ROOT_ENV, REAL_ROOT)
    # In the sandbox, the toolkit this file stands in for; outside (ROOT_ENV), the real one itself.
    original_root = real_root if ROOT_ENV in os.environ else str(Path(argv[0]).resolve().parent.parent)
    real_nvcc = os.path.join(real_root, "bin", "nvcc")
    args = argv[1:]
    work = tempfile.mkdtemp(prefix="nvcc-split-")
    env = {**os.environ, "TMPDIR": work}
    try:
        listed = subprocess.run([real_nvcc, "--dryrun", *args], env=env, capture_output=True, text=True,
                                errors="surrogateescape")
        plan = read_plan(listed.stderr, real_root, original_root) if listed.returncode == 0 else None
        if plan is None:  # not the shape this driver knows: the real nvcc, unchanged
            code = subprocess.run([real_nvcc, *args]).returncode
            _map_deps_file(args, real_root, original_root)
            return code
        return run_plan(plan, env)
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main(sys.argv))
