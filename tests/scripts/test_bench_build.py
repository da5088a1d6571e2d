"""scripts/bench/bench_build.py: each build's steps, read from the ninja log a real ninja writes."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from sandbox.build import nvcc_split
from scripts.bench import bench_build

pytestmark = pytest.mark.slow  # a real ninja build

NINJA = shutil.which("ninja")


@pytest.mark.skipif(NINJA is None, reason="needs ninja")  # torch's extension builds need it: installed everywhere
def test_steps_come_from_ninjas_log_and_the_split_record(tmp_path: Path) -> None:
    ext = tmp_path / "ext" / "cand"
    ext.mkdir(parents=True)
    # torch's object names: <stem>.cuda.o for a .cu, main.o for the bindings, <name>.so for the link
    (ext / "build.ninja").write_text(
        "rule slow\n  command = python3 -c 'import time; time.sleep(0.3)' && touch $out\n"
        "rule quick\n  command = touch $out\n"
        "build cuda.cuda.o: slow\nbuild main.o: quick\nbuild cand.so: quick cuda.cuda.o main.o\ndefault cand.so\n")
    subprocess.run([NINJA, "-j", "2"], cwd=ext, check=True, capture_output=True)
    (ext / f"cuda.cuda.o{nvcc_split.RECORD_SUFFIX}").write_text(json.dumps(
        {"host_s": 0.2, "device_s": 0.1, "compile_s": 0.05, "ids_equal": True}))
    steps = bench_build.ninja_steps(tmp_path)
    assert steps["cu"] >= 0.3 and steps["cpp"] < 0.3 and "link" in steps
    assert steps["ninja"] >= steps["cu"] + steps["link"] - 0.01  # the link waits for the .cu
    assert steps["split"] is True and steps["split_host_s"] == 0.2
    assert bench_build.ninja_steps(tmp_path / "nothing-here") == {}
