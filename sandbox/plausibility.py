"""Rules that bound what a candidate may claim about its own speed. Trusted; runs in the parent.

The child measures each timed call, and the child is untrusted: a candidate can patch or bypass any
clock inside it. Two rules keep a forged or impossible time from becoming a score:

- `timing_bound`: what the parent sees itself. Each timed batch of calls is one round trip (`go` ->
  reply, see sandbox/execute.py); every figure here is per call (the batch's divided by its calls). A
  claim above the wall time of its own round trip is a lie outright. And the kernel accounts, per
  thread, the CPU time the sandbox ran during the round trip (sandbox/cputime.py): waiting for a CPU is
  not in it, so it does not grow on a saturated host, as a wall clock does. A median claim well below
  the median of that, less what an empty batch costs, is under-reported.
- `speed_of_light`: both tasks are memory-bound, so no honest call is faster than the task's minimal
  bytes over the device's measured bandwidth.

Each returns a `Breach` (the rule broken and a diagnosis) or None.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass

CLAIM_OVER_WINDOW_SLACK_MS = 0.05
"""A claim may exceed its window by clock granularity only: host and child read the same CLOCK_MONOTONIC,
and CUDA events sit inside the host's window; 50 us covers the event clock's offset from the host's."""

MIN_CLAIM_FRACTION = {"cpu": 0.45, "cuda": 0.65}
"""The median claim must be at least this share of the parent's estimate of one call (`call_floor_ms`),
measured with scripts/measure_timing_bound.py on honest candidates, idle and with the host saturated:

- CPU (the 2-core CI machine, C++ candidates kl_div, cross_entropy, the log-then-reduce control, load
  average 9-17 with and without 3 more busy loops): claim / (run - empty) was 1.0-1.5 (the child's clock
  also counts the time it waited for a CPU, the kernel's accounting does not). But later, with two workers
  and the test suite sharing the 2 cores (load average ~9), honest kl_div_cpp_correct measured 0.80 twice
  (docs/results/multi-device-cpu-2026-11-23.md), which the first rule (0.8) flagged; 0.6 was 25% under that.
  Then on a faster 2-core machine (2026-11-25: kl_div_cpp_correct's call 0.19 ms, where the harness's own
  per-call work beyond an empty call's, ~0.17 ms, outweighs RUN_NOISE_MS) honest ratios were 0.61-0.75 idle and
  0.56 and 0.59 in the test suite (two honest candidates judged tamper_detected in two runs of it); 0.45 is 20%
  under that. On the CPU the rule now catches an understatement past ~2.5x on calls of 0.7 ms and more, past
  ~4x on a 0.3 ms call; the CPU profile exists to test the pipeline, and its forgeries of the clock itself are
  caught by the identity snapshots, not by this rule.
- GPU (H100, 2026-11-23, docs/results/timing-bound-h100-2026-11-23.log: kl_div_fast, cross_entropy_fast,
  kl_div_triton, batches of 3-8 calls): 0.89-0.95 idle, 0.81-0.88 with 16 busy loops on the 16 cores (the
  host spins in the synchronisation while the device works, so the accounted time is the call's plus the
  host's own share; an empty batch measured under load accounts less, which lowers the ratio). 0.65 is 20%
  under the lowest honest figure: a claim understated by more than 1.54x is caught, and on the fast kernels
  (over 75% of speed-of-light) an understatement that large is also over the speed-of-light limit."""
MIN_CLAIM_FRACTION_TRAINING = {"cpu": 0.6, "cuda": 0.45}
"""The same for the training variants' timed calls (the step, and the forward alone). Their round trips
carry per-call host work of the judge's own that an empty call has not: a gradient-requiring leaf per call,
and the batch's and the previous batch's gradients kept alive for the recycled-gradient check, so every
step's 1 GiB gradient is a fresh allocation. On the H100 (2026-11-23 evening, docs/results/, batches of
1 kl_div and 5 cross_entropy steps) honest claim / floor was 0.73-0.90 for the step and 0.58-0.72 for the
forward alone, and 0.65 flagged three honest kernels; 0.45 is 23% under the lowest. An understatement past
2.2x is caught here, and on a fast kernel the speed-of-light rule bounds it more tightly."""
RUN_NOISE_MS = 0.1
"""How much more CPU a real call's round trip may take, per call, beyond its own work than an empty call's
(the module call, pybind, the candidate's Python, a larger output path). It is paid by every call of a batch
(the first scheme spread it over the batch's calls, which flagged honest cross_entropy_fast at batch 8 on a
loaded H100 host: claim / floor 0.64). Measured on the H100 (2026-11-23 evening, 8 honest forward kernels):
run - empty - claim was 0.04-0.32 ms per call, the largest on device-bound kl_div calls (where the host spins
through the call anyway) and 0.04-0.12 ms on the host-bound cross_entropy calls of batch 8."""


IMPLAUSIBLE_SOL_FRACTION = {"cuda": 1.15, "cpu": 1.5}
"""A median faster than this multiple of speed-of-light is not a measurement of honest work.

GPU: the best honest kernels reach 92-99% of speed-of-light against the measured read bandwidth on the
H100 (docs/benchmarks.md: 3.00 TB/s measured; the HBM3 datasheet peak, 3.35 TB/s, is 1.12x that), so no
kernel that reads its inputs once can pass 1.12x; 1.15 adds the bandwidth probe's run-to-run spread.
CPU: the CPU shapes fit in the last-level cache, so an honest kernel can beat the DRAM probe; the honest
CPU corpus measured at most 0.2 of it (scripts/measure_timing_bound.py), so 1.5 is a wide margin."""


@dataclass(frozen=True)
class Breach:
    rule: str
    diagnosis: str
    details: dict


def call_floor_ms(runs_ms: list[float], empty_runs_ms: list[float]) -> float:
    """The parent's estimate of one call's work: the median CPU time of its batches' round trips, less an
    empty batch's, per call, less RUN_NOISE_MS.

    On the CPU the call is the work the kernel accounts. On a GPU the host spins in the synchronisation
    while the device works, so the accounted time is at most the call's (less if the host yields), and
    the bound can only be looser there, never wrongly strict.
    """
    overhead = statistics.median(empty_runs_ms) if empty_runs_ms else 0.0
    return max(statistics.median(runs_ms) - overhead - RUN_NOISE_MS, 0.0)


def timing_bound(claims_ms: list[float], windows_ms: list[float], runs_ms: list[float],
                 empty_runs_ms: list[float], device_type: str = "cpu", *, training: bool = False) -> Breach | None:
    """The child's claimed times against the parent's per-call wall windows and CPU times (module doc).
    `training`: the calls are a training variant's (MIN_CLAIM_FRACTION_TRAINING)."""
    over = [(i, c, w) for i, (c, w) in enumerate(zip(claims_ms, windows_ms)) if c > w + CLAIM_OVER_WINDOW_SLACK_MS]
    if over:
        i, claim, window = over[0]
        return Breach("timing", f"timed call {i} claims {claim:.4f} ms, but the judge's clock saw the whole round "
                      f"trip take {window:.4f} ms: the child's clock was tampered with", {"calls_over": len(over)})
    median = statistics.median(claims_ms)
    floor = call_floor_ms(runs_ms, empty_runs_ms)
    fractions = MIN_CLAIM_FRACTION_TRAINING if training else MIN_CLAIM_FRACTION
    fraction = fractions["cuda" if device_type == "cuda" else "cpu"]
    if median < fraction * floor:
        return Breach("timing", f"the reported time ({median:.4f} ms) is far below what the judge measured itself "
                      f"(the kernel accounted at least {floor:.4f} ms of CPU work per call)",
                      {"claim_median_ms": median, "floor_ms": floor})
    return None


def speed_of_light(median_ms: float, min_bytes: int, bandwidth_bytes_per_s: float | None,
                   device_type: str) -> Breach | None:
    """A median below the memory floor (min_bytes / bandwidth), beyond the margin, is not a score."""
    if not bandwidth_bytes_per_s:
        return None
    floor_ms = min_bytes / bandwidth_bytes_per_s * 1e3
    fraction = floor_ms / median_ms if median_ms > 0 else float("inf")
    limit = IMPLAUSIBLE_SOL_FRACTION["cuda" if device_type == "cuda" else "cpu"]
    if fraction <= limit:
        return None
    return Breach("implausible_speed",
                  f"the reported time ({median_ms:.4f} ms) is {fraction:.2f}x speed-of-light: reading the task's "
                  f"{min_bytes} bytes once at the device's measured bandwidth takes {floor_ms:.4f} ms, so a kernel "
                  "this fast did not read its inputs (the limit is {limit}x)".replace("{limit}", f"{limit:g}"),
                  {"speed_of_light_fraction": fraction, "limit": limit, "floor_ms": floor_ms})
