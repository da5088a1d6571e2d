"""The device stage never builds or waits (issue 24): the execution child refuses to compile an extension the
build stage did not build, and its import has a limit of seconds.

`pending_steps` is checked against real ninja runs; the candidates are judged for real (g++ builds, a
bubblewrap child).
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from sandbox import Status, judge
from sandbox.config import JudgeConfig
from sandbox.child.no_build import pending_steps

pytestmark = pytest.mark.slow  # real ninja builds

CANDIDATES = Path(__file__).resolve().parent / "candidates"

NINJA_FILE = """rule copy
  command = cp $in $out {flag}
build out.txt: copy in.txt
"""


def ninja_project(directory: Path) -> None:
    """A one-step ninja project (a copy), the shape of torch's: build.ninja, inputs, outputs, .ninja_log."""
    (directory / "build.ninja").write_text(NINJA_FILE.format(flag=""))
    (directory / "in.txt").write_text("source\n")


def ninja(directory: Path) -> None:
    subprocess.run([shutil.which("ninja") or "ninja"], cwd=directory, check=True, capture_output=True)


def test_a_finished_build_has_no_pending_steps(tmp_path: Path) -> None:
    ninja_project(tmp_path)
    assert pending_steps(tmp_path) == ["output out.txt doesn't exist"]
    ninja(tmp_path)
    assert pending_steps(tmp_path) is None


def test_changed_flags_and_missing_inputs_are_pending_with_ninjas_reason(tmp_path: Path) -> None:
    ninja_project(tmp_path)
    ninja(tmp_path)
    # The same step with another command line, as torch writes it for flags computed at run time.
    (tmp_path / "build.ninja").write_text(NINJA_FILE.format(flag="-p"))
    reasons = pending_steps(tmp_path)
    assert reasons is not None and any("command line changed" in r for r in reasons), reasons
    (tmp_path / "in.txt").unlink()
    reasons = pending_steps(tmp_path)
    assert reasons is not None and "missing" in reasons[0], reasons


def test_an_extension_with_run_time_flags_is_a_compile_error_from_the_load_without_a_build(
        judge_config: JudgeConfig) -> None:
    """The build stage builds one command line, the execution child asks for another: refused at once, a
    compile_error naming the extension and ninja's reason, even though the candidate caught the refusal and
    would have fallen back to PyTorch."""
    source = (CANDIDATES / "stamped_build_flags.py").read_text()
    verdict = judge("kl_div", source, "cpu", config=judge_config)
    assert verdict.status is Status.COMPILE_ERROR, verdict.diagnosis
    assert verdict.details.get("rule") == "not_built", verdict.details
    assert "'kl_div_stamped' was not built by the build stage" in verdict.diagnosis
    assert "command line changed" in verdict.diagnosis, verdict.diagnosis
    assert "compile" in verdict.stages and "correctness" not in verdict.stages
    # The build stage built it in ~20-100 s on 2 cores; loading it again must not.
    assert verdict.stages["load"] < 10, verdict.stages


def test_an_import_slower_than_the_load_limit_is_a_timeout_within_the_limit(judge_config: JudgeConfig) -> None:
    config = replace(judge_config, load_timeout_s=3.0)
    verdict = judge("kl_div", (CANDIDATES / "slow_second_import.py").read_text(), "cpu", config=config)
    assert verdict.status is Status.TIMEOUT, verdict.diagnosis
    assert "load_timeout_s = 3 s" in verdict.diagnosis and "build stage" in verdict.diagnosis
    assert verdict.stages["load"] < 3.0 + 5, verdict.stages  # the limit, and killing the child
    assert verdict.details["cost"]["device_held_s"] < config.run_timeout_s / 4, verdict.details["cost"]


def test_removing_the_build_guard_is_tampering(judge_config: JudgeConfig) -> None:
    verdict = judge("kl_div", (CANDIDATES / "unguards_the_build.py").read_text(), "cpu", config=judge_config)
    assert verdict.status is Status.TAMPER_DETECTED, verdict.diagnosis
    assert "cpp_extension._run_ninja_build" in verdict.diagnosis


@pytest.mark.parametrize("name", ["kl_div_cpp_correct.py", "cross_entropy_cpp_correct.py"])
def test_an_honest_built_extension_loads_in_well_under_the_limit(name: str, judge_config: JudgeConfig) -> None:
    """What JudgeConfig.load_timeout_s is derived from: with the guard's dry run, an honest C++ candidate's
    import takes a fraction of a second here."""
    path = Path(__file__).resolve().parents[1] / "corpus" / "cpu" / name
    task = "kl_div" if name.startswith("kl_div") else "cross_entropy"
    verdict = judge(task, path.read_text(), "cpu", config=replace(judge_config, check_extra_shapes=False))
    assert verdict.status is Status.CORRECT, verdict.diagnosis
    assert verdict.stages["load"] < judge_config.load_timeout_s / 10, verdict.stages


def test_a_build_that_floods_its_output_is_a_compile_error_before_the_device(judge_config: JudgeConfig) -> None:
    verdict = judge("kl_div", (CANDIDATES / "floods_its_build.py").read_text(), "cpu", config=judge_config)
    assert verdict.status is Status.COMPILE_ERROR, verdict.diagnosis
    assert "flooding its output" in verdict.diagnosis
    assert verdict.details["stage"] == "compile"
    assert "load" not in verdict.stages and "start" not in verdict.stages, verdict.stages


def test_a_lock_file_left_by_a_killed_build_is_refused_at_once_not_waited_on(tmp_path: Path) -> None:
    """torch's FileBaton.wait polls until the lock file goes; in the execution child nothing else builds, so the
    guard refuses instead (a real torch, in a child process of its own: `install` patches torch globally)."""
    (tmp_path / "ext").mkdir()
    (tmp_path / "ext" / "lock").write_text("")
    script = ("import sys; from sandbox.child import no_build; guard = no_build.install()\n"
              "from torch.utils.file_baton import FileBaton\n"
              "try:\n    FileBaton(sys.argv[1]).wait()\n"
              "except no_build.NotBuilt as exc:\n    print('refused', exc.name, exc.reasons[0]); sys.exit(0)\n"
              "sys.exit(3)\n")
    done = subprocess.run([sys.executable, "-c", script, str(tmp_path / "ext" / "lock")], capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("refused ext ") and "lock file" in done.stdout


def test_a_module_missing_at_import_is_a_compile_error_before_the_device(judge_config: JudgeConfig) -> None:
    verdict = judge("kl_div", (CANDIDATES / "imports_a_missing_module_at_run_time.py").read_text(), "cpu",
                    config=judge_config)
    assert verdict.status is Status.COMPILE_ERROR, verdict.diagnosis
    assert verdict.details["rule"] == "import_failed" and verdict.details["module"] == "tilelang_not_installed"
    assert "This host judges" in verdict.diagnosis
    assert "load" not in verdict.stages and "start" not in verdict.stages, verdict.stages


def test_a_build_made_under_bubblewrap_is_not_reused_under_a_weaker_mechanism(judge_config: JudgeConfig,
                                                                               tmp_path: Path) -> None:
    """ninja records the paths a build ran at (/build under bubblewrap, the host's directory otherwise): shared
    between mechanisms, the execution child would find it out of date and refuse to build it."""
    source = (CANDIDATES.parent.parent / "corpus" / "cpu" / "kl_div_cpp_correct.py").read_text()
    config = replace(judge_config, build_root=tmp_path / "builds")
    for mechanism in ("auto", "unshare"):
        verdict = judge("kl_div", source, "cpu", config=replace(config, isolation=mechanism))
        assert verdict.status is Status.CORRECT, (mechanism, verdict.diagnosis)
