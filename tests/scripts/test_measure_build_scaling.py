"""scripts/experiments/measure_build_scaling.py: ninja's own command for a step, rerun in copies, and g++'s word
on the PCH.

Real ninja, real g++ with a real precompiled header; the build directory is laid out as the build child leaves it
(commands naming the sandbox's /build).
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from scripts.experiments import measure_build_scaling

pytestmark = pytest.mark.slow  # real g++ with a real precompiled header

NINJA, GXX = shutil.which("ninja"), shutil.which("c++")


def _build(tmp_path: Path) -> tuple[Path, Path]:
    """An extension build dir (<key>/ext/<name>) whose build.ninja names /build, and a PCH directory."""
    ext = tmp_path / "key" / "ext" / "cand"
    ext.mkdir(parents=True)
    (ext / "main.cpp").write_text("#include <torch/extension.h>\nint answer() { return kAnswer; }\n")
    (ext / "build.ninja").write_text(
        "rule compile\n  command = c++ -MMD -MF $out.d -std=c++17 -c $in -o $out\n"
        "build main.o: compile /build/ext/cand/main.cpp\n")
    headers = tmp_path / "include" / "torch"
    headers.mkdir(parents=True)
    (headers / "extension.h").write_text("#pragma once\nconstexpr int kAnswer = 42;\n")
    pch = tmp_path / "pch"
    (pch / "torch").mkdir(parents=True)
    subprocess.run(["c++", "-std=c++17", "-x", "c++-header", str(headers / "extension.h"), "-o",
                    str(pch / "torch" / "extension.h.gch")], check=True)
    return ext, pch


@pytest.mark.skipif(NINJA is None or GXX is None, reason="needs ninja and g++ (installed wherever torch builds)")
def test_copies_of_a_step_run_apart_and_gcc_says_whether_it_read_the_pch(tmp_path: Path) -> None:
    ext, pch = _build(tmp_path)
    command = measure_build_scaling.step_command(ext, "main.o").replace("/build/", f"{ext.parents[1]}/")
    assert "main.cpp" in command and command.startswith("c++")
    env = {"PATH": "/usr/bin:/bin", "CPATH": f"{pch}:{tmp_path / 'include'}"}
    row = measure_build_scaling.run_copies(command, "main.o", 2, env, ext)
    assert row["copies"] == 2 and row["max_s"] >= row["p50_s"] > 0
    assert not (ext / "main.o").exists()  # each copy wrote its own object elsewhere
    read = measure_build_scaling.pch_report(command, "main.o", env, ext)
    assert any(line.startswith("! ") and line.endswith("torch/extension.h.gch") for line in read), read
    # A PCH g++ cannot use (other flags here) is marked 'x', with -Winvalid-pch's reason.
    other = command.replace("-std=c++17", "-std=c++20 -DOTHER=1")
    rejected = measure_build_scaling.pch_report(other, "main.o", env, ext)
    assert any(line.startswith("x ") for line in rejected), rejected
