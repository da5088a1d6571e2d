"""A build is reused only where it would be built the same way (issue 40, point 1).

Two installs of the same torch at different paths share one build root: each judges an honest C++ kernel
`correct`, on a build of its own (the key holds where Python and torch live, sandbox/build/compiler.py
`build_inputs`). And a stored build that was made elsewhere under the same key (a judge whose key did not hold
the paths, a difference no key sees) is refused by the execution child and built again by the judge: the
candidate's verdict, never a compile_error of the host's making.

The second install is the test's own virtual environment copied to another path with hard links (`cp -al`):
the same files (so the same torch, compiler and Python), at another prefix, so torch's include and library
directories in build.ninja differ, as they do between two virtual environments or a re-created one. A venv made
with `--system-site-packages` would import torch from the first one's path, and a prefix of symbolic links is
not what the sandbox binds; the copy is neither. Everything runs for real: g++ and ninja builds, sandboxed
children, a second interpreter in its own process.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from dataclasses import asdict, replace
from pathlib import Path

import pytest
import torch
from torch.utils import cpp_extension

from sandbox import Status, judge
from sandbox.build import compiler
from sandbox.config import JudgeConfig

pytestmark = pytest.mark.slow  # real builds in two installs

CORPUS = Path(__file__).resolve().parents[1] / "corpus"
CANDIDATES = Path(__file__).resolve().parent / "candidates"
REPO = Path(__file__).resolve().parents[2]
HONEST = (CORPUS / "cpu" / "kl_div_cpp_correct.py").read_text()

_JUDGE_IN_ANOTHER_INSTALL = """
import json, sys
from pathlib import Path
from sandbox import judge
from sandbox.config import JudgeConfig
fields = json.loads(sys.argv[1])
config = JudgeConfig(**{k: Path(v) if k.endswith("_root") else v for k, v in fields.items()})
verdict = judge("kl_div", Path(sys.argv[2]).read_text(), "cpu", config=config)
print(verdict.model_dump_json())
"""


@pytest.fixture
def config(judge_config: JudgeConfig, tmp_path: Path) -> JudgeConfig:
    """A build root of this test's own (it replaces a stored build), the session's cache root: its baselines, and
    its precompiled headers for this install's builds (they change no build's output or key, sandbox/build/accel.py:
    a build here took ~7 s with them, ~40 s without, on the loaded 2-core CI machine). The second install judges
    without them (`judge_in`): they are keyed by flags that hold torch's paths, and building them for its paths
    takes minutes on 2 cores without bearing on the key."""
    return replace(judge_config, build_root=tmp_path / "builds", precompiled_headers=True)


@pytest.fixture(scope="module")
def other_install(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """This interpreter's virtual environment at another path: its python executable there."""
    prefix = Path(sys.prefix)
    assert prefix != Path(sys.base_prefix), "run the tests from a virtual environment (the README's install)"
    copy = tmp_path_factory.mktemp("install") / "venv"
    same_disk = os.stat(tmp_path_factory.getbasetemp()).st_dev == os.stat(prefix).st_dev
    subprocess.run(["cp", "-al" if same_disk else "-a", str(prefix), str(copy)], check=True)
    python = copy / "bin" / Path(sys.executable).name
    where = subprocess.run([str(python), "-c", "import sys, torch; print(sys.prefix); print(torch.__file__)"],
                           capture_output=True, text=True, check=True).stdout.split()
    assert where == [str(copy), str(copy / Path(torch.__file__).relative_to(prefix))], where
    return python


def judge_in(python: Path, config: JudgeConfig, source: Path) -> dict:
    """The verdict of `source` judged by the install of `python`, in a process of its own, as a dict; without
    precompiled headers (`config`'s docstring)."""
    plain = replace(config, precompiled_headers=False)
    fields = {k: str(v) if isinstance(v, Path) else v for k, v in asdict(plain).items()}
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH")) if p)}
    done = subprocess.run([str(python), "-c", _JUDGE_IN_ANOTHER_INSTALL, json.dumps(fields), str(source)],
                          capture_output=True, text=True, env=env, timeout=900, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def key_dirs(config: JudgeConfig) -> set[str]:
    return {p.name for p in config.build_root.iterdir() if p.is_dir()}


def test_two_installs_sharing_one_build_root_each_judge_an_honest_kernel_correct(
        config: JudgeConfig, other_install: Path) -> None:
    first = judge("kl_div", HONEST, "cpu", config=config)
    assert first.status is Status.CORRECT, first.diagnosis
    (mine,) = key_dirs(config)

    second = judge_in(other_install, config, CORPUS / "cpu" / "kl_div_cpp_correct.py")
    assert second["status"] == "correct", second["diagnosis"]
    assert "stale_build" not in second["details"], second["details"]  # nothing stored was refused
    (theirs,) = key_dirs(config) - {mine}  # a build of its own
    assert second["toolchain"] == first.toolchain  # the same versions: only where they live differs

    # The first install's build is untouched by the second: judged again, it is reused and correct.
    again = judge("kl_div", HONEST, "cpu", config=config)
    assert again.status is Status.CORRECT, again.diagnosis
    assert "stale_build" not in again.details and again.stages["compile"] < 5, again.stages

    # The other install's build put where this install's key is, as a judge whose key held no paths stored it:
    # the execution child refuses it, the judge builds it again, and the verdict is the candidate's.
    shutil.rmtree(config.build_root / mine)
    shutil.copytree(config.build_root / theirs, config.build_root / mine, symlinks=True)
    rebuilt = judge("kl_div", HONEST, "cpu", config=config)
    assert rebuilt.status is Status.CORRECT, rebuilt.diagnosis
    stale = rebuilt.details["stale_build"]
    assert stale["rebuilt"] is True and "command line changed" in stale["refused"], stale

    # What was built again is stored: the next judging reuses it without a refusal.
    reused = judge("kl_div", HONEST, "cpu", config=config)
    assert reused.status is Status.CORRECT, reused.diagnosis
    assert "stale_build" not in reused.details, reused.details


def test_the_key_holds_where_torch_and_cuda_live_and_what_the_judge_adds() -> None:
    """Without a build: the key's inputs change with the torch directory, CUDA_HOME and the judge's environment."""
    base = compiler.build_inputs("cuda", {"JUDGE_JIT_SHAPES": "[[8, 8]]"})
    assert compiler.build_inputs("cuda", {"JUDGE_JIT_SHAPES": "[[16, 8]]"}) != base
    assert json.loads(compiler.build_inputs("cpu", {}))["python prefix"] == sys.prefix
    saved, cpu = cpp_extension.CUDA_HOME, compiler.build_inputs("cpu", {})
    try:
        cpp_extension.CUDA_HOME = "/opt/another-cuda"
        assert compiler.build_inputs("cuda", {"JUDGE_JIT_SHAPES": "[[8, 8]]"}) != base
        assert compiler.build_inputs("cpu", {}) == cpu  # a CPU build runs no nvcc
    finally:
        cpp_extension.CUDA_HOME = saved
    source, chain = "x = 1\n", compiler.toolchain("cpu")
    assert compiler.build_key(source, chain, "a") != compiler.build_key(source, chain, "b")


def test_a_refusal_of_a_build_made_in_this_judging_stays_the_candidates_compile_error(config: JudgeConfig) -> None:
    """A candidate whose flags change at run time is refused on its cached build, built again, and refused again:
    then the refusal is the candidate's (sandbox/child/no_build.py), however often it is judged."""
    source = (CANDIDATES / "stamped_build_flags.py").read_text()
    first = judge("kl_div", source, "cpu", config=config)
    assert first.status is Status.COMPILE_ERROR and first.details.get("rule") == "not_built", first.diagnosis
    assert "stale_build" not in first.details  # built in this judging: refused at once, nothing rebuilt

    cached = judge("kl_div", source, "cpu", config=config)
    assert cached.status is Status.COMPILE_ERROR and cached.details.get("rule") == "not_built", cached.diagnosis
    assert cached.details["stale_build"]["rebuilt"] is True, cached.details
