"""Which build outcomes are the candidate's (stored, reused) and which are the judge's (system_error, never
stored), sandbox/build/compiler.py and sandbox/pipeline.prepare. Real build children where a child is involved."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from sandbox import Status
from sandbox.build import compiler as build
from sandbox.pipeline import prepare
from sandbox.verdict import Verdict

from .conftest import CORPUS

TORCH_ONLY = (CORPUS / "cpu" / "kl_div_torch_only.py").read_text()


def test_a_killed_compiler_or_the_accelerator_in_the_way_is_ours() -> None:
    assert "Killed signal" in build.infrastructure_failure(
        "FAILED: main.o\nc++: fatal error: Killed signal terminated program cc1plus\ncompilation terminated.")
    assert build.infrastructure_failure("main.cpp:1: fatal error: error writing to /tmp/ccX.s: No space left on device")
    assert build.infrastructure_failure(
        "main.cpp:3:10: fatal error: /judge-accel/0223c0ab9443/torch/extension.h: No such file or directory")
    honest = "main.cpp:4:5: error: 'undeclared_weight' was not declared in this scope"
    assert build.infrastructure_failure(honest) is None


def _stored(tmp_path: Path, result: build.BuildResult, accel: str) -> build.KeyPaths:
    paths = build.KeyPaths(tmp_path / "key")
    build.start_build(paths, "source")
    build.store_result(paths, result, accel)
    return paths


def test_a_stored_failure_is_tried_again_under_other_accelerators_a_success_is_not(tmp_path: Path) -> None:
    failed = build.BuildResult(ok=False, build_failed=True, log="main.cpp:1:1: error: x", seconds=1.0)
    paths = _stored(tmp_path, failed, "pch on")
    again = build.load_result(paths, "pch on")
    assert again is not None and again.build_failed and again.cached
    assert build.load_result(paths, "pch off") is None
    ok = build.BuildResult(ok=True, build_failed=False, log="", seconds=1.0)
    paths = _stored(tmp_path, ok, "pch on")
    assert build.load_result(paths, "pch off") is not None  # the same object code either way
    build.clear_build(paths.build)
    assert build.load_result(paths, "pch on") is None  # evicted products: build again


def test_the_accelerator_configuration_names_what_took_part(judge_config) -> None:
    on = build.accelerator_config(judge_config, "cpu")
    assert on != build.accelerator_config(replace(judge_config, precompiled_headers=False), "cpu")
    assert on != build.accelerator_config(replace(judge_config, pch_subset=False), "cpu")
    assert '"pch_layout"' in on and '"hooks"' in on


def test_a_build_child_killed_from_outside_is_a_system_error_and_not_stored(judge_config, tmp_path: Path) -> None:
    """SIGKILL is what the OOM killer and a dying worker send: no outcome of the candidate's, nothing stored."""
    killed = "import torch\nimport os, signal\nos.kill(os.getpid(), signal.SIGKILL)\n"
    source = TORCH_ONLY.replace("import torch\n", killed, 1)
    config = replace(judge_config, build_root=tmp_path / "builds")
    verdict = prepare("kl_div", source, target="cpu", config=config)
    assert isinstance(verdict, Verdict) and verdict.status is Status.SYSTEM_ERROR, verdict
    assert "SIGKILL" in verdict.diagnosis and verdict.details["stage"] == "compile"
    assert not list((tmp_path / "builds").glob(f"*/{build.RESULT_FILE}"))


def test_an_unwritable_build_cache_is_a_system_error(judge_config, tmp_path: Path) -> None:
    (tmp_path / "not-a-directory").write_text("")
    config = replace(judge_config, build_root=tmp_path / "not-a-directory" / "builds")
    verdict = prepare("kl_div", TORCH_ONLY, target="cpu", config=config)
    assert isinstance(verdict, Verdict) and verdict.status is Status.SYSTEM_ERROR
    assert "could not be written" in verdict.diagnosis
