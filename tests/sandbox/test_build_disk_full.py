"""A full build disk is the judge's failure, with a machine-readable reason, and nothing of it is stored (issue
40.3): a real build on a real full filesystem (a small tmpfs as the build root), full to the last block (the
source cannot be written) or all but full (the source and build.ninja fit, the compiler's object file does not);
once space returns, the same source builds."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from sandbox import Status
from sandbox.build.compiler import DISK_FULL
from sandbox.candidate import PreparedCandidate
from sandbox.config import JudgeConfig
from sandbox.pipeline import prepare
from sandbox.verdict import Verdict
from tests.small_disk import fill, free_bytes, small_disk

from .conftest import CORPUS

HONEST = (CORPUS / "cpu" / "kl_div_cpp_correct.py").read_text()


@pytest.mark.parametrize("leave_bytes", [0, 40 << 10], ids=["full", "all-but-full"])
def test_a_full_build_root_is_a_system_error_of_kind_disk_full_and_nothing_is_stored(
        judge_config: JudgeConfig, tmp_path: Path, leave_bytes: int) -> None:
    with small_disk(tmp_path / "disk", 8 << 20) as disk:
        config = replace(judge_config, build_root=disk / "builds")
        filler = fill(disk, leave_bytes)
        verdict = prepare("kl_div", HONEST, target="cpu", config=config)
        assert isinstance(verdict, Verdict) and verdict.status is Status.SYSTEM_ERROR, verdict
        assert verdict.details["infrastructure_kind"] == DISK_FULL, verdict.details
        assert "No space left on device" in verdict.diagnosis
        assert not list(config.build_root.glob("*/result.json"))  # not stored: the next attempt builds again
        # Nor is anything of the failed build left taking space: a build that filled the disk must not keep it full.
        assert free_bytes(disk) >= leave_bytes
        if leave_bytes:
            return  # the freed disk's build is the "full" case's (one real build per test run is enough)
        filler.unlink()
        again = prepare("kl_div", HONEST, target="cpu", config=config)
        assert isinstance(again, PreparedCandidate) and not again.compile_cached, again
