"""scripts/experiments/measure_spare_start.py: how it reads a child's PYTHONPROFILEIMPORTTIME output (the GPU
run's figures come from it) and its bytecode rows."""

from __future__ import annotations

from scripts.experiments import measure_spare_start as measure

STDERR = """\
import time: self [us] | cumulative | imported package
import time:       120 |        120 |   _io
import time:      2000 |    4500000 | torch
import time:    900000 |     900000 |   torch._C
import time:      1500 |    3000000 | sandbox
a line the child printed itself
"""


def test_the_import_profile_ranks_imports_by_cumulative_and_by_own_time() -> None:
    profile = measure.import_profile(STDERR, top=2)
    assert profile["by_cumulative"] == [("torch", 0.002, 4.5), ("sandbox", 0.0015, 3.0)]
    assert profile["by_self"][0] == ("torch._C", 0.9, 0.9)
    assert profile["total_s"] == [round(0.00012 + 0.002 + 0.9 + 0.0015, 3)]


def test_a_package_that_is_not_installed_is_a_row_that_says_so() -> None:
    assert measure.bytecode_coverage("no_such_package_here") == {"package": "no_such_package_here", "found": False}
    row = measure.bytecode_coverage("sandbox")
    assert row["modules"] >= 20 and 0 <= row["cached"] <= row["modules"]
