"""Which build outcomes are the candidate's (stored, reused) and which are the judge's (system_error, never
stored), sandbox/build/compiler.py and sandbox/pipeline.prepare. Real build children where a child is involved."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from sandbox import Status
from sandbox.build import blame
from sandbox.build import compiler as build
from sandbox.candidate import PreparedCandidate
from sandbox.pipeline import REBUILT_NOTE, prepare
from sandbox.verdict import Verdict

from .conftest import CORPUS

TORCH_ONLY = (CORPUS / "cpu" / "kl_div_torch_only.py").read_text()


KILLED = "FAILED: main.o\nc++: fatal error: Killed signal terminated program cc1plus\ncompilation terminated."
NO_SPACE = "main.cpp:1: fatal error: error writing to /tmp/ccX.s: No space left on device"
HONEST_ERROR = "main.cpp:4:5: error: 'undeclared_weight' was not declared in this scope"


def _evidence(*, host_oom: int | None = 0, limit: bool = False, free: int | None = 40 << 30) -> blame.HostEvidence:
    return blame.HostEvidence(host_oom_kills=host_oom, limit_reached=limit, build_root_free=free)


def test_a_killed_compiler_or_a_full_disk_is_ours_only_where_the_parent_measured_it() -> None:
    # What the message names, confirmed by what the parent read itself: the host's failure.
    assert "Killed signal" in blame.infrastructure_failure(KILLED, _evidence(host_oom=1))
    assert "No space left" in blame.infrastructure_failure(NO_SPACE, _evidence(free=1 << 20))
    # The same words with nothing measured behind them are the candidate's text (an #error, a raise at import).
    assert blame.infrastructure_failure(KILLED, _evidence(host_oom=0)) is None
    assert blame.infrastructure_failure(KILLED, _evidence(host_oom=None)) is None
    assert blame.infrastructure_failure(KILLED, _evidence(host_oom=2, limit=True)) is None  # its own memory limit
    assert blame.infrastructure_failure(NO_SPACE, _evidence(free=blame.DISK_FULL_FREE_BYTES)) is None
    assert blame.infrastructure_failure(NO_SPACE, _evidence(free=None)) is None
    assert blame.infrastructure_failure(HONEST_ERROR, _evidence(host_oom=1, free=0)) is None
    assert blame.accelerators_named(
        "main.cpp:3:10: fatal error: /judge-accel/0223c0ab9443/torch/extension.h: No such file or directory")
    assert blame.accelerators_named(HONEST_ERROR) is None


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


def test_a_build_child_that_kills_itself_is_the_candidates_not_the_hosts(judge_config, tmp_path: Path) -> None:
    """SIGKILL is also what the host's OOM killer sends, but with no OOM kill counted by the host the kill is the
    candidate's own (sandbox/build/blame.py): judged in the execution child, where it happens again, never a
    system_error (which a trainer drops instead of scoring)."""
    killed = "import torch\nimport os, signal\nos.kill(os.getpid(), signal.SIGKILL)\n"
    source = TORCH_ONLY.replace("import torch\n", killed, 1)
    config = replace(judge_config, build_root=tmp_path / "builds")
    prepared = prepare("kl_div", source, target="cpu", config=config)
    assert isinstance(prepared, PreparedCandidate), prepared


QUOTES_THE_HOST = '''import tempfile
from pathlib import Path

import torch
from torch import nn
from torch.utils.cpp_extension import load

# A file without torch's headers, so that each of its builds takes a moment: the test is about what its error says.
SOURCE = Path(tempfile.mkdtemp()) / "quotes_the_host.cpp"
SOURCE.write_text('#error "c++: fatal error: Killed signal terminated program cc1plus: No space left on device '
                  '(/judge-accel/0/torch/extension.h.gch)"\\n')
ext = load(name="quotes_the_host", sources=[str(SOURCE)], extra_cflags=["-O2"], verbose=False)


class ModelNew(nn.Module):
    def forward(self, predictions, targets):
        return ext.kl_div(predictions, targets)
'''


def test_a_compile_error_that_quotes_the_hosts_failures_is_the_candidates(judge_config, tmp_path: Path) -> None:
    """A compile error whose text names a killed compiler, a full disk and the judge's precompiled header, on a host
    where none of them happened, is the candidate's compile_error, stored like any other: once built again with no
    accelerator offered (the parent's check of the header's part), and with no OOM kill or full disk measured."""
    config = replace(judge_config, build_root=tmp_path / "builds")
    verdict = prepare("kl_div", QUOTES_THE_HOST, target="cpu", config=config)
    assert isinstance(verdict, Verdict) and verdict.status is Status.COMPILE_ERROR, verdict
    assert "Killed signal terminated program" in verdict.diagnosis and "infrastructure" not in verdict.details
    assert REBUILT_NOTE in verdict.compile_log, verdict.compile_log  # built again with no accelerator offered
    assert list((tmp_path / "builds").glob(f"*/{build.RESULT_FILE}"))  # the candidate's outcome: stored


def test_an_unwritable_build_cache_is_a_system_error(judge_config, tmp_path: Path) -> None:
    (tmp_path / "not-a-directory").write_text("")
    config = replace(judge_config, build_root=tmp_path / "not-a-directory" / "builds")
    verdict = prepare("kl_div", TORCH_ONLY, target="cpu", config=config)
    assert isinstance(verdict, Verdict) and verdict.status is Status.SYSTEM_ERROR
    assert "could not be written" in verdict.diagnosis
