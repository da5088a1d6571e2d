"""Advice on a CUDA candidate's build time, for the verdict (`details.build_advice`).

Why: a fresh build's time is set by one thing the candidate chooses, how much of torch its `.cu` needs. The
judge compiles a `.cu` against slim torch headers first (sandbox/child/build/slim_headers.py: 15-18 s for a typical
candidate on the 2-core development machine); a `.cu` that needs more (tensor arithmetic or indexing on
`torch::Tensor`, autograd, pybind11) is built against torch's full headers, ~290k lines that nvcc's three
front ends take 60-65 s over. A model refining its kernel, or a person, can only fix what it is told, so the
verdict says which case this was and what to change.

The build child says which case it was, one `[judge]` line per extension (sandbox/child/build/hooks.py); those
lines are read from the build log here. The child is untrusted, so the advice is only ever text for the
candidate's own verdict, never an input to a decision.

A first build on a host also builds the shared precompiled headers (sandbox/build/accel.py) before its own
compile starts: `pch_note` says so, with the seconds it took, so that a slow first build is not read as slow code.
"""

from __future__ import annotations

import re

FULL_HEADERS = re.compile(r"^\[judge\] (?P<ext>\S+): \.cu (?:needs|built with) torch's full headers \((?P<why>.*)\)",
                          re.M)
MAIN_FALLBACK = re.compile(r"^\[judge\] (?P<ext>\S+): main\.cpp needs more of torch/extension\.h than its subset "
                           r"\(subset build: (?P<why>.*)\); building it again", re.M)
FAST_LAYOUT = "tests/corpus/cuda/kl_div_fast_split.py"


def advice(build_log: str, build_seconds: float | None = None) -> str | None:
    """What to change so its .cu and main.cpp compile in seconds, or None when both took the fast path."""
    parts = [text for text in (_cu_advice(build_log), _main_advice(build_log)) if text]
    if not parts:
        return None
    took = f"This build took {build_seconds:.0f} s: " if build_seconds is not None else ""
    return took + " ".join(parts)


def _main_advice(build_log: str) -> str | None:
    found = MAIN_FALLBACK.search(build_log)
    if found is None:
        return None
    return (f"its main.cpp (cpp_sources) did not compile with torch/extension.h less torch's C++ frontend "
            f"({found.group('why')}) and was compiled again with all of it, which takes twice as long: "
            "torch::nn, optim, data, jit and serialize are seldom needed beside a kernel.")


def _cu_advice(build_log: str) -> str | None:
    found = FULL_HEADERS.search(build_log)
    if found is None:
        return None
    return (f"its .cu was compiled against torch's full headers ({found.group('why')}), which nvcc spends "
            "40-65 s on whatever the kernels are. The judge compiles a .cu against slim torch headers first "
            "(at::Tensor and its methods, TORCH_CHECK, AT_DISPATCH, the torch:: factories it names, CUDA streams): "
            "do tensor arithmetic and indexing in Python or in cpp_sources rather than in the .cu, or keep the .cu "
            "to kernels and launch functions taking raw pointers and a cudaStream_t with the torch::Tensor wrapper in "
            "cpp_sources and load_inline(..., no_implicit_headers=True); its .cu then compiles in seconds "
            f"({FAST_LAYOUT} in the judge's repository shows that layout).")


PCH_NOTE_MIN_S = 0.5
"""Seconds of building the shared headers worth a word: below, the variants were ready (a lock taken and let go)."""


def pch_note(building_s: float, build_seconds: float) -> str | None:
    """Why a build took longer than the next one will: it first built the host's shared precompiled headers
    (sandbox/build/accel.py), or waited for another build doing so. None when they were ready."""
    if building_s < PCH_NOTE_MIN_S:
        return None
    return (f"This build also built the shared precompiled headers (the first build on this host, or the first "
            f"since torch or the compiler changed): {building_s:.0f} s of its {build_seconds:.0f} s. Later builds "
            "reuse them.")
