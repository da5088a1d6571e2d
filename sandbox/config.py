"""`JudgeConfig`: every knob of the judge in one typed place, each default with its reason."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

from sandbox.execution import start_slots


def _default_build_root() -> Path:
    return Path(os.environ.get("JUDGE_BUILD_ROOT", Path.home() / ".cache" / "kernel-judge" / "builds"))


def _default_cache_root() -> Path:
    return Path(os.environ.get("JUDGE_CACHE_ROOT", Path.home() / ".cache" / "kernel-judge"))


def _default_start_slots() -> int:
    return int(os.environ.get("JUDGE_SPARE_START_SLOTS", "0")) or start_slots.default_count()


@dataclass(frozen=True)
class JudgeConfig:
    build_root: Path = field(default_factory=_default_build_root)
    """Builds live in build_root/<sha256 of source + toolchain>/; identical source is compiled once."""
    cache_root: Path = field(default_factory=_default_cache_root)
    """Baseline timings and measured bandwidth per device model are cached here."""
    isolation: str = os.environ.get("JUDGE_ISOLATION", "auto")
    """"auto" or "bwrap": bubblewrap, or refuse to judge (sandbox.isolation.require_isolation says why and
    how to install it). "unshare" or "none": weaker isolation, only when named (development); recorded in
    every verdict and never ranked."""
    compile_timeout_s: float = 300.0
    """A fresh CUDA load_inline build took ~60 s on the H100 machine; 5x that is a hung compiler."""
    run_timeout_s: float = 300.0
    """Wall limit for the whole execution child (import, trials, timing)."""
    load_timeout_s: float = 30.0
    """Wall limit, in seconds, for importing the candidate in the execution child (its module and ModelNew()),
    which holds the device. Its extensions are built by then and the child never compiles (sandbox/child/no_build.py),
    so an honest import is Python running the module, ninja's dry run and the loading of each built library
    (and Triton's import where used): 0.02-0.14 s for the C++ corpus candidates on a loaded 2-core CPU host,
    a few seconds on an H100 host. 30 s is ~10x the latter, room for a loaded host and a cold page cache; a
    build's limit (compile_timeout_s, 300 s) here would let a compile hold the device for minutes (issue 24)."""
    call_timeout_s: float = 30.0
    """Wall limit for one candidate forward call: the official kl_div reference takes ~4 ms on an H100."""
    memory_limit_bytes: int = 16 << 30
    """Host memory for the child process tree (the CPU tests use far less)."""
    max_pids: int = 256
    """Processes and threads in the child tree: ninja + compilers + torch's thread pools fit easily."""
    output_limit_bytes: int = 1 << 20
    """What we keep of the child's stdout/stderr; the rest is counted and dropped."""
    disk_limit_bytes: int = 2 << 30
    """Size of the child's private /tmp."""
    trials_per_distribution: int = 2
    """Fresh seeds per input distribution; with ~4 distributions this gives ~8 correctness trials."""
    timing_budget_ms: float = 2000.0
    """Target total time of the timed repetitions (reps are derived from it, do_bench style)."""
    min_reps: int = 10
    """Timed calls at least, however slow the candidate: a median needs a few."""
    max_reps: int = 100
    """Timed calls at most. Each is a round trip with inputs from its own fresh seed and a fp64 truth the
    parent computes (a few ms of device time per call at the official shape). On the H100 the honest kernels'
    IQR is under 0.5% of their median (docs/benchmarks.md), so a median of 100 calls is within ~0.1%."""
    cpu_max_reps: int = 30
    """Timed calls at most on the CPU (`max_reps_on`). A CPU host's timing tests the pipeline and bounds a forged time;
    it ranks nothing a GPU's leaderboard compares. On the CPU each call is a round trip of its own (batches of 1) with
    a 16 MiB flush and a fp64 truth: 100 calls take 3.3-3.5 s of an idle 2-core box's correct verdict, 30 take 1.1 s,
    and a first verdict on a fresh box waits for them. 30 is what the test corpus judges every CPU candidate with
    (tests/sandbox/conftest.py), honest and hostile, so the verdicts CI establishes are this setting's."""
    baselines: tuple[str, ...] = ("eager", "compile")
    compile_jobs: int = int(os.environ.get("JUDGE_COMPILE_JOBS", "2"))
    """ninja's parallelism inside one build (MAX_JOBS); the service runs several builds at once."""
    precompiled_headers: bool = os.environ.get("JUDGE_PRECOMPILED_HEADERS", "1") != "0"
    """Offer builds a precompiled torch/extension.h (sandbox/build/accel.py): ~3x less g++ time for main.cpp,
    same object code. Built once per host under cache_root, on first need."""
    pch_subset: bool = os.environ.get("JUDGE_PCH_SUBSET", "1") != "0"
    """Offer main.cpp the PCH of torch/extension.h less torch's C++ frontend first (sandbox/build/accel.py):
    about half the g++ time of the full PCH; a main.cpp that needs the frontend is compiled again with it."""
    slim_headers: bool = os.environ.get("JUDGE_SLIM_HEADERS", "1") != "0"
    """Compile a CUDA candidate's .cu against slim torch headers first (sandbox/child/build/slim_headers.py): ~3.5x less
    nvcc time for a typical candidate; a .cu that needs the full headers is built again with them."""
    split_nvcc: bool = os.environ.get("JUDGE_SPLIT_NVCC", "0") == "1"
    """Compile a .cu with nvcc's host and device front ends side by side (sandbox/build/nvcc_split.py): the same
    steps and outputs, the .cu's nvcc 27% faster alone (16.2 to 11.9 s, 2 cores). Off by default: with 8
    builds at once on the H100's 16 cores the second lane slowed main.cpp, the longer step, and the p50 build
    went from 26.2 to 30.4 s (docs/benchmarks.md). Only under bubblewrap, which puts the driver in nvcc's place."""
    child_threads: int = int(os.environ.get("JUDGE_CHILD_THREADS", "1"))
    """CPU threads for torch in the child and for the CPU baselines, so both are timed alike."""
    spare_context_at_start: bool = os.environ.get("JUDGE_SPARE_CONTEXT_AT_START", "0") != "0"
    """A pre-started child (sandbox/execution/warm.py) creates its device context while it starts, beside whatever
    candidate is being timed, rather than inside the device gate (scripts/experiments/measure_spare_overlap.py measures
    what a context creation does to a kernel timed beside it)."""
    spare_start_slots: int = field(default_factory=_default_start_slots)
    """Pre-started children (sandbox/execution/warm.py) in their CPU-only start at once on this host, counted across
    every worker process that shares cache_root (sandbox/execution/start_slots.py); JUDGE_SPARE_START_SLOTS, default
    half the CPUs, at least 1. A start is ~3 s of one core (bubblewrap, Python, `import torch`) on an H100 host,
    and there starts scale with the cores (6 at once: 3.5 s each against 2.9 alone,
    docs/results/spare-start-h100-2026-11-25b.md). Half the cores (16 on a two-GPU host, 8 on a one-GPU one) leaves
    the workers' default pools (7 children per GPU) uncapped and caps only what would crowd out the builds and the
    candidates' parent work: every spare of a host at once (many GPUs, or large JUDGE_WARM_* settings). Fewer is
    not faster where cores are idle, and on a host shared with other busy processes it is slower (each start gets
    one process's share of the CPU: docs/results/spare-supply-cpu-2026-11-26.md)."""
    check_extra_shapes: bool = True
    trace: bool | None = {"1": True, "0": False}.get(os.environ.get("JUDGE_TRACE", ""))
    """Record every kernel and copy of the candidate's life in its child (sandbox/child/recorder.py) and refuse timing
    phases whose record is cut, has device work outside the timed calls and the judge's own steps, or whose timed
    calls launch different kernels (sandbox/execution/tracing.py). None (the default): off, on every device:
    measured on an H100 (docs/results/trace-h100-2026-11-26.md), the recorder (device activity alone, a 5 ms lead
    before each batch) keeps every ranked median within 1% (six kernels, Triton's included), but holds the device
    ~1.1 s longer per correct candidate (median 2.6 -> 3.7 s), which a best-of-N batch pays on every sample.
    `JUDGE_TRACE=1` turns it on (hostile corpus 35 of 35 as declared with it on, on a GPU), `0` off everywhere
    (scripts/gpu/trace_check.py compares ranked medians with and without). On the CPU a trace that is on records
    and is read back, and is reported unavailable (no device activity); on a GPU whose profiler records no device
    work (the child's probe says so before the candidate exists) it is not started."""

    def max_reps_on(self, device_type: str) -> int:
        """Timed calls at most on this kind of device: `max_reps`, on the CPU no more than `cpu_max_reps`."""
        return self.max_reps if device_type == "cuda" else min(self.max_reps, self.cpu_max_reps)

    def traces(self, cuda: bool) -> bool:
        """Whether a child on this kind of device records the kernel trace (`trace`; off unless asked for)."""
        return bool(self.trace)

    clocks_index: int | None = None
    """NVML's index of the card timed, where it is not the CUDA device's (CUDA_VISIBLE_DEVICES naming cards out of
    NVML's order). None: the CUDA index, and no reading on the CPU (sandbox/profiling/clocks.py)."""
