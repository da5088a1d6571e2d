"""scripts/experiments/nvcc_phases.py: the CUDA source is read from a candidate without running it, and nvcc's
phase timer is parsed into a table (a tiny kernel without torch's headers, so that the build takes seconds)."""

from __future__ import annotations

import shutil
import sys

import pytest

from scripts.experiments import nvcc_phases


CANDIDATE = '''
raise SystemExit("a candidate file is read, never run")
helper = "__global__ void decoy() {}"
cuda_source = r"""
#include <cuda_runtime.h>
__global__ void scale(float* x, float a, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] *= a;
}
"""
'''


def test_the_longest_kernel_literal_is_taken_without_running_the_file(tmp_path):
    path = tmp_path / "candidate.py"
    path.write_text(CANDIDATE)
    source = nvcc_phases.cuda_source(path)
    assert "__global__ void scale" in source and "decoy" not in source


def test_a_file_without_a_kernel_is_refused(tmp_path):
    path = tmp_path / "candidate.py"
    path.write_text('source = "int main() { return 0; }"\n')
    with pytest.raises(SystemExit, match="no string literal declares a __global__ function"):
        nvcc_phases.cuda_source(path)


@pytest.mark.slow  # real nvcc
@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc is not installed")
def test_phases_are_timed_and_tabled(tmp_path, monkeypatch, capsys):
    path = tmp_path / "candidate.py"
    path.write_text(CANDIDATE)
    monkeypatch.setattr(sys, "argv", ["nvcc_phases.py", str(path), "--arch", "9.0"])
    assert nvcc_phases.main() == 0
    out = capsys.readouterr().out
    assert "| cicc (compute_90) |" in out and "| ptxas (sm_90) |" in out
    total = float(out.split("| sum of phases | ")[1].split(" ")[0])
    assert total > 0
