"""Rules that bound what a candidate may claim about its own speed. Trusted; runs in the parent.

The child measures each timed call, and the child is untrusted: a candidate can patch or bypass any
clock inside it. Three rules keep a forged or impossible time from becoming a score:

- `timing_bound`: what the parent sees itself. Each timed batch of calls is one round trip (`go` ->
  reply, see sandbox/execution/phases.py); every figure here is per call (the batch's divided by its calls). A
  claim above the wall time of its own round trip is a lie outright. And the kernel accounts the CPU time
  every task of the sandbox ran during the round trip, exited threads and processes included
  (sandbox/execution/cputime.py): waiting for a CPU is not in it, so it does not grow on a saturated host, as a wall
  clock does. A median claim well below the median of that, less what an empty batch costs, is
  under-reported.
- `untimed_work_bound` (GPU only): the same claim against the parent's own wall window beyond an empty
  batch's. Device work lengthens that window whether or not the host spins while it waits, so a candidate
  that makes the host sleep through its device work (which takes that work out of the CPU time) still
  cannot claim much less than the window shows.
- `speed_of_light`: both tasks are memory-bound, so no honest call is faster than the task's minimal
  bytes over the device's measured bandwidth.
- `unattributed_work` (GPU): a timed call's inputs are made inside the batch, before its calls
  (sandbox/child/timing.py), so work a candidate's hook does on them runs on the device between the batch's lead
  and its first call's start event. The judge knows what belongs there (its flushes, calibrated before the candidate
  existed, and the making of the inputs, which the parent times itself for the same seeds); what is beyond that is
  charged to the calls (`ranked_claim`), and when it is a large share of a call the timing is refused.

What ranks (`ranked_claim`, `cpu_scale`) is the child's claim plus what the parent charges it: on a GPU the device
time beyond the judge's own work before the calls; on the CPU, where the child's clock is its own process's (a native
patch of libpython's `clock_gettime` slows it), claims scaled up to at least the CPU time the kernel accounted to the
sandbox for a call.

Each returns a `Breach` (the rule broken and a diagnosis) or None.
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

CLAIM_OVER_WINDOW_SLACK_MS = 0.05
"""A claim may exceed its window by clock granularity only: host and child read the same CLOCK_MONOTONIC,
and CUDA events sit inside the host's window; 50 us covers the event clock's offset from the host's."""

MIN_CLAIM_FRACTION = {"cpu": 0.3, "cuda": 0.65}
"""The median claim must be at least this share of the parent's estimate of one call (`call_floor_ms`),
measured with scripts/experiments/measure_timing_bound.py on honest candidates, idle and with the host saturated:

- CPU (the 2-core CI machine, C++ candidates kl_div, cross_entropy, the log-then-reduce control, load
  average 9-17 with and without 3 more busy loops): claim / (run - empty) was 1.0-1.5 (the child's clock
  also counts the time it waited for a CPU, the kernel's accounting does not); with two workers and the test
  suite sharing the 2 cores (load average ~9), honest kl_div_cpp_correct measured 0.80
  (docs/results/multi-device-cpu-2026-11-23.md). On a faster 2-core machine (kl_div_cpp_correct's call 0.19 ms,
  where the harness's own per-call work beyond an empty call's, ~0.17 ms, outweighs RUN_NOISE_MS) honest
  ratios were 0.61-0.75 idle and down to 0.56 in the test suite. 0.45 is 20% under the lowest. On the CPU the
  rule catches an understatement past ~2.5x on calls of 0.7 ms and more, past
  ~4x on a 0.3 ms call; the CPU profile exists to test the pipeline, and its forgeries of the clock itself are
  caught by the identity snapshots, not by this rule.
  Its limit is load (the same machine, 2026-11-27, scripts/experiments/measure_timing_bound.py, the rule's own
  claim / floor): kl_div_cpp_correct and cross_entropy_cpp_correct read 0.59-0.72 idle, 0.53-0.68 with one busy
  loop, 0.50-0.55 with three; and in the full test suite beside one more busy loop (load average 4-6 on 2 cores)
  kl_div_cpp_correct read 0.40 once (1.02 ms claimed, 2.53 ms floor) and was flagged. A real call's round trip
  holds more CPU than its claim and an empty batch's together: 0.26-0.40 ms idle, ~0.6 ms with three busy loops,
  ~1.6 ms in that suite run (where it goes is not yet known: no thread of the child's runs beside it); an empty batch
  measured beside each timed one would follow the load, but after candidate code has run (a finalizer of its
  inputs could run in it and lower the floor), so the empty batches stay before the candidate is loaded.
  Since a timed call's inputs are made inside its round trip (issue 39), the CPU's refusal is 0.3 (both tables): the
  ranked time no longer rests on it, `cpu_scale` ranks every claim at least at the floor, so an understatement short of
  refusal buys nothing; the refusal is for a gross one (past 3.3x), and an honest file must never reach it. Beside three
  helpers' test runs (load average 5-6 on the 2 cores, trace on, 2026-11-28) honest kl_div_cpp_correct read 0.66-0.70
  typically and, once, under 0.45 in a timing run again after a (scripted) throttle.
- GPU (H100, 2026-11-23, docs/results/timing-bound-h100-2026-11-23.log: kl_div_fast, cross_entropy_fast,
  kl_div_triton, batches of 3-8 calls): 0.89-0.95 idle, 0.81-0.88 with 16 busy loops on the 16 cores (the
  host spins in the synchronisation while the device works, so the accounted time is the call's plus the
  host's own share; an empty batch measured under load accounts less, which lowers the ratio). 0.65 is 20%
  under the lowest honest figure: a claim understated by more than 1.54x is caught, and on the fast kernels
  (over 75% of speed-of-light) an understatement that large is also over the speed-of-light limit."""
MIN_CLAIM_FRACTION_TRAINING = {"cpu": 0.3, "cuda": 0.45}
"""The same for the training variants' timed calls (the step, and the forward alone). Their round trips
carry per-call host work of the judge's own that an empty call has not: a gradient-requiring leaf per call,
and the batch's and the previous batch's gradients kept alive for the recycled-gradient check, so every
step's 1 GiB gradient is a fresh allocation. On the H100 (docs/results/, 2026-11-23, batches of
1 kl_div and 5 cross_entropy steps) honest claim / floor was 0.73-0.90 for the step and 0.58-0.72 for the
forward alone, and 0.65 flagged three honest kernels; 0.45 is 23% under the lowest. An understatement past
2.2x is caught here, and on a fast kernel the speed-of-light rule bounds it more tightly.

On the CPU the forward alone is a short call (~1 ms for the four honest C++ training files) beside that work, so
its ratio is the lowest of all (scripts/experiments/measure_timing_bound.py, the 2-core machine, 2026-11-27,
docs/results/timing-bound-cpu-2026-11-27.md): the step 0.80-0.92 idle, 0.73-0.79 with one busy loop and 0.68-0.79
with three; the forward alone 0.66-0.81 idle, 0.57-0.73 with one busy loop, 0.535-0.66 with three, and 0.54-0.59
in the full test suite beside one busy loop. The 0.6 this was before flagged honest files in each of those loads
(tamper_detected, "forward alone"); 0.45 is 16% under the lowest, the CPU's forward fraction, and catches an idle
understatement of the forward alone past 1.5-1.8x and of the step past 1.8-2.0x. With it, seven judgings of the
four files beside four busy loops were all correct (the forward alone 0.57-0.66)."""
RUN_NOISE_MS = 0.1
"""How much more CPU a real call's round trip may take, per call, beyond its own work than an empty call's
(the module call, pybind, the candidate's Python, a larger output path). It is paid by every call of a batch:
spread over the batch's calls, it would flag honest cross_entropy_fast at batch 8 on a loaded H100 host
(claim / floor 0.64). Measured on the H100 (2026-11-23, 8 honest forward kernels):
run - empty - claim was 0.04-0.32 ms per call, the largest on device-bound kl_div calls (where the host spins
through the call anyway) and 0.04-0.12 ms on the host-bound cross_entropy calls of batch 8."""

MAKING_SPIKE_FACTOR = 3.0
"""CPU: a call's making, as the parent measured it just before its batch, relieves the batch's CPU time of at most this
many times the median of every making of that distribution the parent measured for the candidate (`making_caps`).

Why: the parent's figure is one thread's CPU time over 0.1-0.8 ms of work, and now and then a reading comes out many
times longer (a fault, a reclaim, a virtual CPU's stolen time counted as the thread's). On the 2-core development
machine (2026-11-29, scripts/experiments/measure_making_spikes.py and its first draft): idle, 3 of 280 kl_div readings
took over 2 ms, the worst 16x its distribution's median; beside the test suite (load 4.4), 2 of 420 kl_div readings
were over 3x (the worst 4.0x) and 0 of 360 cross_entropy ones (the worst 2.3x). The child made the same inputs at
another moment and does not share the spike, so an uncapped spike takes work the candidate did off the floor. With four
timed batches (the fewest; forged claims that agree stop the timing there), two or three spikes move the median: CI's
loaded machine judged class 13's dead-thread forgery (claims 0.78 ms, 4.6 ms of CPU accounted in its first timing)
`correct` when its retiming read a floor of 0 with the same CPU time per call (7.45 ms), so the parent's readings of a
~0.4 ms making must have come out ~5.5 ms in three of that timing's four batches, or ~11 ms in two (they are not
recorded). Load that slows the making in both processes alike (a host's caches) moves the median with it."""


def making_caps(makings: Iterable[tuple[str, float]]) -> dict[str, float]:
    """Per distribution, the most of one call's making (the parent's CPU ms) a batch's CPU time is relieved of:
    MAKING_SPIKE_FACTOR times the median of `makings`, (distribution, ms) pairs."""
    seen: dict[str, list[float]] = {}
    for distribution, ms in makings:
        seen.setdefault(distribution, []).append(ms)
    return {d: MAKING_SPIKE_FACTOR * statistics.median(v) for d, v in seen.items()}


MIN_WINDOW_FRACTION = 0.43
"""On a GPU, the median claim per call must be at least this share of the median wall window per call less the
empty batch's (`details.timing`: `windows_ms`, `empty_call_window_ms`, the smallest of the empty batches). Honest
ratios on H100s, over every correct verdict whose details carry both (claim / (window - empty), medians):
0.69-0.98 in the acceptance of 2026-11-26 (docs/results/verdicts-h100-2026-11-26.json, 18 forward kernels and 4
training steps; per batch 0.66-0.98), and down to 0.54 over 79 forward verdicts of the nine H100 runs of
2026-11-23 to 11-26 (honest cross_entropy_fast, 2026-11-25c, batches of 8 calls of 0.19 ms, where the harness's
own per-call launch and flush work is as long as the call; those files are in the history before 2f65fa8);
training steps, 25 verdicts: 0.63-0.91. 0.43 is 20% under the lowest. The window is a wall clock: it also
carries whatever kept the host from running the harness, which an empty batch measured at calibration may not
have had, and that only lowers an honest ratio; 16 busy loops on the 16 cores of an H100 host moved kl_div_fast
from 0.77 to 0.74 and cross_entropy_fast from 0.69 to 0.67 (docs/results/timing-bounds-h100-2026-11-26.json).
An honest ratio r understated f times is caught once r / f < 0.43: past 1.6-1.8x for the fast kernels, past
2.3x at most; beside the CPU-time rule, whose floor a host that sleeps through the device's work (instead of
spinning) would empty. Not applied on the CPU, where the window carries the waiting
for a CPU of a saturated host (10 ms a round trip on the 2-core CI machine), nor to the training variants'
forward-alone batches (no honest figures)."""


SOL_PROBE_MARGIN = 0.01
"""How far past speed-of-light a median may be before the rule calls it skipped work: what the bandwidth
probe's own error could put an honest kernel past 100%. The probe
(sandbox/execution/measure_baselines.py, `measure_bandwidth`) is measured once per device model and cached; its
readings of H100s across hosts and runs, 31 distinct
measurements in 12 result files (docs/results before 2f65fa8, which kept 6 of them), were 2.9969-3.0086
TB/s: median 3.0042, -0.24% to +0.15% of it, standard deviation 0.09%, the highest 0.39% above the lowest. So a
cached bandwidth can be 0.4% off the card's, and an honest kernel's fraction with it. Within one run the probe's
calls spread about as much: quartiles 0.22-0.27% apart, extremes -0.4% and +0.3% of the median, in three probes
on one H100 whose medians were 3.0045-3.0061 TB/s (docs/results/timing-bounds-h100-2026-11-26.json; the probe
records this as `bandwidth_probe` in the baselines). The best honest kernels measured 98.9% (kl_div_fast_split,
2026-11-25e; kl_div_fast 98.6% on 2026-11-26), i.e. up to 99.3% against a probe read 0.4% low. 1% is 2.6 times
the probe's whole run-to-run range, 11 standard deviations and 4 times its within-run interquartile range."""

IMPLAUSIBLE_SOL_FRACTION = {"cuda": 1.0 + SOL_PROBE_MARGIN, "cpu": 1.5}
"""A median faster than this multiple of speed-of-light is not a measurement of honest work.

GPU: 100% of speed-of-light against the measured bandwidth, plus SOL_PROBE_MARGIN. The bandwidth is the better
of a device copy and torch's read-only sum (the copy on the H100 of 2026-11-26: 3.005 against 2.97 TB/s); a
kernel that reads faster than torch's own kernels is much more likely skipping bytes than beating them (hostile
kernels have ranked at 102-104%), and if an honest one ever does, the probe is what must get faster, not this
limit wider.
CPU: the probe copies 256 MiB, far out of every cache, but a CPU call's inputs (256 KiB for kl_div at 64x512)
are evicted before each call by a 16 MiB flush only (sandbox/child/timing.py, CPU_FLUSH_BYTES), so on a host whose
last-level cache is larger they may be read from cache, faster than the DRAM probe allows. The honest CPU
corpus measured at most 0.2 of speed-of-light (scripts/experiments/measure_timing_bound.py; kl_div_cpp_correct
0.08 on the CI machine: 0.17 ms against a 0.013 ms floor), so 1.5 is a wide margin that still catches a time forged to a
few microseconds."""


@dataclass(frozen=True, kw_only=True)
class Breach:
    rule: str
    diagnosis: str
    details: dict


def call_floor_ms(runs_ms: Sequence[float], empty_runs_ms: Sequence[float], device_type: str = "cpu",
                  windows_ms: Sequence[float] = (), empty_windows_ms: Sequence[float] = ()) -> float:
    """The parent's estimate of one call's work: the median CPU time of its batches' round trips, less an empty
    batch's (which makes real inputs and evicts the cache alike: the judge's own work in a round trip), per call,
    less RUN_NOISE_MS. On the CPU the caller passes both less the parent's own making of the same inputs at the same
    moment (sandbox/execution/making.py): the making is most of a round trip's CPU time, and a loaded host inflates
    it, so an empty batch timed at another moment is no measure of it.

    On the CPU the call is the work the kernel accounts. On a GPU the host spins in the synchronisation
    while the device works, so the accounted time is at most the call's (less if the host yields), and
    the bound can only be looser there, never wrongly strict. There the caller also passes the wall windows, and the
    judge's own share is `gpu_own_work_ms`: the empty batches' CPU time alone is no measure of it when the host's load
    moved between the calibration and the timing. On the CPU the windows are not weighed: the making's own CPU time is
    measured beside each batch (`TimedCall.own_makes_ms`), and a window there carries a saturated host's wait for a CPU.
    """
    if device_type == "cuda" and windows_ms and empty_windows_ms:
        overhead = gpu_own_work_ms(runs_ms, windows_ms, empty_runs_ms, empty_windows_ms)
    else:
        overhead = statistics.median(empty_runs_ms) if empty_runs_ms else 0.0
    return max(statistics.median(runs_ms) - overhead - RUN_NOISE_MS, 0.0)


def gpu_own_work_ms(runs_ms: Sequence[float], windows_ms: Sequence[float], empty_runs_ms: Sequence[float],
                    empty_windows_ms: Sequence[float]) -> float:
    """GPU: the CPU time the judge's own work in a round trip (the lead, the making of the inputs, the flushes) accounts
    inside the timed batches, per call: the empty batches' wall window times the share of the wall the sandbox ran on
    a CPU during the timed batches (at most 1), and never less than the empty batches' own CPU time.

    Why not the empty batches' CPU time alone: the host spins through the device's work, so a round trip's CPU time is
    its wall time less what it waited for a CPU, and the empty batches are measured once, at a spare's calibration,
    before the candidate exists (so that no code of its can run in them). On a host whose load moves (a burst's builds
    on the same cores), the calibration may wait for a CPU for half its window while the timed batches wait for none:
    on an H200 with 16 builds beside the worker (2026-11-28, scripts/gpu/builders_burst.py), honest kl_div_fast's
    empty batches accounted 3.7-4.2 ms of CPU in windows of 6.4-7.6 ms, its timed batches 8.0 ms in 8.0-8.1 ms, and the
    floor read 1.2-4.3 ms against 0.51 ms claims: 8 honest kernels of 64 were refused (3 of 55 in a burst through
    `serve`), and timing them again changed nothing (the calibration is not redone). Scaled by the timed batches' own
    share, the judge's work is counted as the timed batches ran it. Idle, both shares are 0.96-1.0 (the H200 acceptance
    of the same day), and this is the empty batches' CPU time to within 0.1 ms. What a candidate can move: the timed
    share, capped at 1, so the most it can take off the floor is the calibration's own wait for a CPU, which happened
    before it was loaded."""
    window = statistics.median(windows_ms)
    on_cpu = min(1.0, statistics.median(runs_ms) / window) if window > 0 else 1.0
    return max(statistics.median(empty_runs_ms), on_cpu * statistics.median(empty_windows_ms))


def timing_bound(claims_ms: list[float], windows_ms: list[float], runs_ms: list[float],
                 empty_runs_ms: list[float], device_type: str = "cpu", *, training: bool = False,
                 empty_windows_ms: Sequence[float] = ()) -> Breach | None:
    """The child's claimed times against the parent's per-call wall windows and CPU times (module doc).
    `training`: the calls are a training variant's (MIN_CLAIM_FRACTION_TRAINING). `empty_windows_ms`: the empty
    batches' wall windows per call, which a GPU's floor weighs (`gpu_own_work_ms`)."""
    over = [(i, c, w) for i, (c, w) in enumerate(zip(claims_ms, windows_ms)) if c > w + CLAIM_OVER_WINDOW_SLACK_MS]
    if over:
        i, claim, window = over[0]
        return Breach(rule="timing",
                      diagnosis=f"timed call {i} claims {claim:.4f} ms, but the judge's clock saw the whole round "
                      f"trip take {window:.4f} ms: the child's clock was tampered with",
                      details={"calls_over": len(over)})
    median = statistics.median(claims_ms)
    floor = call_floor_ms(runs_ms, empty_runs_ms, device_type, windows_ms, empty_windows_ms)
    fractions = MIN_CLAIM_FRACTION_TRAINING if training else MIN_CLAIM_FRACTION
    fraction = fractions["cuda" if device_type == "cuda" else "cpu"]
    if median < fraction * floor:
        return Breach(rule="timing",
                      diagnosis=f"the reported time ({median:.4f} ms) is far below what the judge measured itself "
                      f"(the kernel accounted at least {floor:.4f} ms of CPU work per call)",
                      details={"claim_median_ms": median, "floor_ms": floor})
    return None


def untimed_work_bound(claims_ms: list[float], windows_ms: list[float], empty_window_ms: float,
                       device_type: str) -> Breach | None:
    """On a GPU, the median claim against the median wall window beyond an empty batch's (which makes real inputs:
    the judge's own work in a round trip) (MIN_WINDOW_FRACTION)."""
    if device_type != "cuda" or not claims_ms:
        return None
    median = statistics.median(claims_ms)
    beyond = statistics.median(windows_ms) - empty_window_ms
    if median >= MIN_WINDOW_FRACTION * beyond:
        return None
    return Breach(rule="timing",
                  diagnosis=f"the reported time ({median:.4f} ms) is far below what the judge's own wall clock saw: "
                  f"a round trip took {beyond:.4f} ms per call beyond an empty one's, so device work ran that the "
                  "reported time does not count", details={"claim_median_ms": median, "window_beyond_empty_ms": beyond,
                                                    "min_window_fraction": MIN_WINDOW_FRACTION})


UNATTRIBUTED_SLACK_MS = 0.01
UNATTRIBUTED_SLACK_FRACTION = 0.02
"""What a batch's span before its first call may exceed the judge's own work in it (the lead's flushes, the making of
every call's inputs, a flush), per call, without a charge, for the making's part: 10 us plus 2% of a call's making.
The making in the child runs after a long lead of flushes and beside the batch's other sets; on an H100 (2026-11-28)
honest kl_div batches exceeded the parent's own making by 0.055-0.085 ms a call (1.1-1.8% of its 4.81 ms),
cross_entropy training steps by 0.007-0.012 ms (of 0.32), with one batch in thirteen far over (the host held up: the
median batch decides the refusal, and a charged batch is one of many in the ranked median)."""
UNATTRIBUTED_FLUSH_FRACTION = 0.01
"""The flushes' part of that allowance: 1% of the batch's own flushes (its lead and the flush before its first call,
counted at the rate the spare's calibration measured), per call. The span's reference is the empty batches' span,
which ran the same lead through the same flushes, so the flushes cancel out of the excess except for how far their
rate moved between the calibration and the timing, and that drift is a share of the flush work, not a constant: on
an H200 (2026-11-29) the single flushes between honest cross_entropy calls ran 1.7-2.2% over their calibrated 60 us in
the batches charged, and honest spans exceeded a quietly calibrated reference by up to 0.025 ms a call, where its
lead's flushes are ~1.2 ms a call and the making's allowance 0.016 ms (so 0.75% or more of the flushes drifted). A
kernel with a short making and a long lead (cross_entropy) is charged by that drift unless the allowance follows the
flushes; one with a long making (kl_div) was covered by the making's 2%. With this allowance, none of 16 honest
cross_entropy_fast judgings on quietly calibrated spares there (spans -0.056 to +0.021 ms a call beyond the
reference) and none of 16 kl_div_fast ones (-0.17 to +0.059) had a batch charged. So an honest span is charged
nothing, and work hidden there is charged all but the sum: on an H200 ~0.028 ms of a 0.141 ms cross_entropy call
(its making 0.31 ms, its flushes 1.2 ms a call), ~0.106 ms of a 0.512 ms kl_div call (4.0 ms, 1.6 ms;
docs/threat-model.md, "What the slack leaves")."""
UNATTRIBUTED_REFUSE_FRACTION = 0.25
"""Device work beyond the judge's before a call, in the median batch, of more than this share of the median claim is
refused outright (`tamper_detected`, rule `unattributed_work`): a call whose work is done while its inputs are made
(by a hook of any kind the harness's own code triggers) is not a measurement, even once charged."""


SHORT_SPAN_SLACK_MS = 0.05
SHORT_SPAN_FRACTION = 0.5
"""A batch's span before its first call shorter than half the judge's own work in it (its calibrated flushes and the
making of the inputs, which the parent times itself), per call, is not a measurement: no device makes the inputs
twice as fast as it did for the parent. Half, not a tight bound: a parent whose host fell behind its own device
reads its making long, and an honest child must never be called a forger for that."""


def too_short(excess_ms: float, own_ms: float) -> bool:
    """Whether a span before a call (beyond the judge's own work, `excess_ms`) is shorter than that work can be."""
    return excess_ms < -(SHORT_SPAN_SLACK_MS + SHORT_SPAN_FRACTION * own_ms)


def unattributed_slack(make_ms: float, flushes_ms: float) -> float:
    """What a call's span may exceed the judge's own work in it uncharged (per call, ms): the making's allowance and
    the flushes' (UNATTRIBUTED_SLACK_MS, UNATTRIBUTED_SLACK_FRACTION, UNATTRIBUTED_FLUSH_FRACTION)."""
    return UNATTRIBUTED_SLACK_MS + UNATTRIBUTED_SLACK_FRACTION * make_ms + UNATTRIBUTED_FLUSH_FRACTION * flushes_ms


def unattributed_charge(excess_ms: float, make_ms: float, flushes_ms: float = 0.0) -> float:
    """What a call is charged for device time before it beyond the judge's own work (per call, ms): `make_ms` the
    judge's making of its inputs, `flushes_ms` the batch's own flushes at the calibrated rate, per call."""
    return max(0.0, excess_ms - unattributed_slack(make_ms, flushes_ms))


def ranked_claim(claim_ms: float, *, device_type: str, excess_ms: float = 0.0, make_ms: float = 0.0,
                 flushes_ms: float = 0.0) -> float:
    """What one batch ranks, per call, before `cpu_scale`: on a GPU the claim plus `unattributed_charge`; on the CPU
    the claim."""
    if device_type == "cuda":
        return claim_ms + unattributed_charge(excess_ms, make_ms, flushes_ms)
    return claim_ms


def cpu_scale(claims_ms: list[float], runs_ms: list[float], empty_runs_ms: list[float]) -> float:
    """CPU: how much the ranked claims are scaled up so that their median is at least the parent's own measure of a
    call, `call_floor_ms` (the sandbox's CPU time per round trip less an empty one's, which makes the same inputs and
    evicts the cache alike, less RUN_NOISE_MS). The child's clock is its own process's: a native patch of libpython's
    `clock_gettime` (its GOT entry) slows it, and every claim with it; the kernel's accounting is not the child's to
    change. 1.0 where the claims are at least that (an honest child's host clock also counts the time it waited for a
    CPU, which the accounting leaves out). Applied to the medians, not batch by batch: each batch's CPU time carries
    the host's noise, which a per-batch maximum would add to every honest ranked time."""
    if not claims_ms or not empty_runs_ms:
        return 1.0
    floor = call_floor_ms(runs_ms, empty_runs_ms)
    median = statistics.median(claims_ms)
    return max(1.0, floor / median) if median > 0 else 1.0


def unattributed_work(excess_ms: list[float], make_ms: list[float], claims_ms: list[float],
                      device_type: str, flushes_ms: Sequence[float] = ()) -> Breach | None:
    """GPU: the median batch's charge for device work before its calls against the median claim
    (UNATTRIBUTED_REFUSE_FRACTION). `flushes_ms`: each batch's own flushes per call (none given: no flushes' part)."""
    if device_type != "cuda" or not claims_ms:
        return None
    flushes = list(flushes_ms) or [0.0] * len(excess_ms)
    charge = statistics.median(unattributed_charge(e, m, f) for e, m, f in zip(excess_ms, make_ms, flushes))
    claim = statistics.median(claims_ms)
    if charge <= UNATTRIBUTED_REFUSE_FRACTION * claim:
        return None
    return Breach(rule="unattributed_work",
                  diagnosis=f"device work the judge did not ask for ran while it made the timed calls' inputs: "
                  f"{charge:.4f} ms per call beyond the making itself and its flushes (the judge made the same inputs "
                  f"and timed that), against {claim:.4f} ms claimed for the call: the call's work was done outside "
                  "the call, by code that ran while its inputs were being made",
                  details={"charge_median_ms": charge, "claim_median_ms": claim,
                           "refuse_fraction": UNATTRIBUTED_REFUSE_FRACTION})


UNEXPLAINED_SLACK_MS = 0.2
UNEXPLAINED_FRACTION = 0.1
"""GPU: how much more of the parent's wall window per call than an empty batch's may be left unexplained by the device
spans the child reports (the span before the calls, the calls' events, the gaps between them): 0.2 ms plus 10% of the
window. An honest child's spans are the device's timeline, which the window holds whole with the host's fixed share of
a round trip around it; a child whose event readings are scaled (a native patch of `cudaEventElapsedTime` through its
GOT entry, as gpu-mode/pygpubench's published exploits do) under-reports every span alike, and leaves that share of
the window unexplained: 30% at a scale of 0.7."""


def unexplained_wall(unexplained_ms: list[float], empty_unexplained_ms: list[float], windows_ms: list[float],
                     device_type: str) -> Breach | None:
    """GPU: the median batch's wall window left unexplained by the child's device spans, against an empty batch's
    (measured before the candidate existed)."""
    if device_type != "cuda" or not unexplained_ms or not empty_unexplained_ms:
        return None
    beyond = statistics.median(unexplained_ms) - statistics.median(empty_unexplained_ms)
    limit = UNEXPLAINED_SLACK_MS + UNEXPLAINED_FRACTION * statistics.median(windows_ms)
    if beyond <= limit:
        return None
    return Breach(rule="timing",
                  diagnosis=f"the device spans the child reports leave {beyond:.4f} ms per call of the judge's own "
                  "wall clock unexplained, beyond what an empty round trip leaves: the child's event readings "
                  "under-report the device's time", details={"unexplained_beyond_empty_ms": beyond, "limit_ms": limit})


def speed_of_light_fraction(median_ms: float, min_bytes: int, bandwidth_bytes_per_s: float | None) -> float | None:
    """The memory floor (min_bytes / bandwidth) over the median: 1.0 is a call that reads its bytes at the measured
    bandwidth. What the verdict reports (`Performance.speed_of_light_fraction`) and what `speed_of_light` checks."""
    if not bandwidth_bytes_per_s:
        return None
    floor_ms = min_bytes / bandwidth_bytes_per_s * 1e3
    return floor_ms / median_ms if median_ms > 0 else float("inf")


def speed_of_light(median_ms: float, min_bytes: int, bandwidth_bytes_per_s: float | None,
                   device_type: str) -> Breach | None:
    """A median below the memory floor (min_bytes / bandwidth), beyond the margin, is not a score."""
    fraction = speed_of_light_fraction(median_ms, min_bytes, bandwidth_bytes_per_s)
    if fraction is None or bandwidth_bytes_per_s is None:
        return None
    floor_ms = min_bytes / bandwidth_bytes_per_s * 1e3
    limit = IMPLAUSIBLE_SOL_FRACTION["cuda" if device_type == "cuda" else "cpu"]
    if fraction <= limit:
        return None
    return Breach(rule="implausible_speed",
                  diagnosis=f"the reported time ({median_ms:.4f} ms) is {fraction:.2f}x speed-of-light "
                  f"({100 * fraction:.1f}%): "
                  f"reading the task's {min_bytes} bytes once at the device's measured bandwidth takes {floor_ms:.4f} "
                  f"ms, so a kernel this fast did not read its inputs (the limit is {limit:g}x)",
                  details={"speed_of_light_fraction": fraction, "limit": limit, "floor_ms": floor_ms})
