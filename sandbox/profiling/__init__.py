"""Profiles of a judged candidate's kernels (Nsight Compute), the GPU's clocks around a timing (NVML), and
rules over a recorded kernel trace. The profiles are advisory and never change a ranked time; the clocks decide
whether a time is ranked, and the trace rules whether a timing phase was tampered with (both applied by
sandbox/execution: phases.py and tracing.py).

- `report`: ncu's raw CSV -> typed per-kernel rows (`KernelProfile`), and the stored `Profile`;
- `render`: a profile as plain text for a prompt;
- `ncu`: the command line, where ncu is and its version;
- `run`: `profile_candidate`, ncu wrapping the candidate's own sandboxed child (sandbox/child/profiled.py);
- `clocks`: NVML readings before and after a timing, and the "throttled during timing" rule;
(The kernel trace's records, canaries and rules of issue 28 are in sandbox/shared/trace.py: the child's recorder
reads the canaries' sizes there too.)
"""

from sandbox.profiling.render import render_text
from sandbox.profiling.report import KernelProfile, NcuReport, Profile, ProfileParseError, Stall, parse_raw_csv

__all__ = ["KernelProfile", "NcuReport", "Profile", "ProfileParseError", "Stall", "parse_raw_csv", "render_text"]
