"""The Nsight Compute command line the judge profiles a candidate with, and where ncu is.

Trusted code: it builds an argv and reads `ncu --version`; nothing here runs candidate code. The argv runs
inside the candidate's sandbox (sandbox/profiling/run.py), ncu as the wrapper of the profiled child.

Why these options:
- `--csv --page raw --print-units base`: one row per launch with every metric as a number in base units
  (ns, bytes, bytes/s), which `report.parse_raw_csv` reads without guessing ncu's auto-scaled units.
- `--metrics` (a fixed list, `METRICS`), not a section set: the full set replays each kernel ~40 times; these
  few need a handful of passes. The stall reasons come from PC sampling, named by regex because their set
  differs between architectures (an unknown metric name would fail the whole run).
- `--profile-from-start off`: only what the entry module brackets with cudaProfilerStart/Stop (the profiled
  calls after a warm-up) is profiled; the candidate's import, its first call's lazy set-up and the input
  generation are not.
- `--launch-count`: a bound on the kernels profiled (each is replayed several times, so a candidate launching
  thousands of tiny kernels would otherwise hold the device for minutes); the sandbox's wall limit bounds the
  rest.
- `--clock-control none`: the card keeps the clocks it runs at, as in the judge's timing. ncu's default locks
  them to base clocks, which needs privileges a sandboxed child lacks, and would report times that are not
  the timing's.
- `--log-file`: the report goes to a file in the child's build directory rather than stdout, which the
  candidate writes too.
"""

from __future__ import annotations

import functools
import glob
import os
import re
import shutil
import subprocess
from pathlib import Path

from sandbox.profiling import report

METRICS = (*report.NAMED_METRICS, "regex:^smsp__pcsamp_warps_issue_stalled_[a-z_]+$")
LAUNCH_LIMIT = 32
"""Kernel launches profiled at most: an honest candidate launches one to three kernels a call (the corpus),
so 3 calls fit many times over; each launch costs a few replays of the kernel and ncu's own set-up."""
NCU_ENV = "JUDGE_NCU"
_VERSION = re.compile(r"Version\s+([0-9][\w.\-]*)")


def find_ncu() -> str | None:
    """ncu's path: $JUDGE_NCU, then PATH, then CUDA's and Nsight Compute's usual places; None where absent."""
    named = os.environ.get(NCU_ENV)
    if named:
        return named if os.access(named, os.X_OK) else None
    found = shutil.which("ncu")
    if found:
        return found
    for pattern in ("/usr/local/cuda/bin/ncu", "/usr/local/cuda-*/bin/ncu", "/opt/nvidia/nsight-compute/*/ncu"):
        for path in sorted(glob.glob(pattern), reverse=True):
            if os.access(path, os.X_OK):
                return path
    return None


@functools.cache
def ncu_version(path: str) -> str | None:
    """"2025.3.1.0" from `ncu --version`; None when it does not say (a stand-in, a broken install)."""
    try:
        out = subprocess.run([path, "--version"], capture_output=True, text=True, timeout=60).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    match = _VERSION.search(out)
    return match[1] if match else None


def install_dir(path: str) -> Path:
    """The directory ncu runs from (its libraries and sections lie beside it): bound into the sandbox."""
    return Path(path).resolve().parent


def ncu_argv(ncu: str, log_file: str, target: list[str], *, launch_limit: int = LAUNCH_LIMIT,
             metrics: tuple[str, ...] = METRICS) -> list[str]:
    """ncu wrapping `target`; the raw CSV goes to `log_file` (a path as the sandboxed child sees it)."""
    return [ncu, "--csv", "--page", "raw", "--print-units", "base", "--metrics", ",".join(metrics),
            "--profile-from-start", "off", "--launch-count", str(launch_limit), "--clock-control", "none",
            "--target-processes", "all", "--log-file", log_file, "--", *target]
