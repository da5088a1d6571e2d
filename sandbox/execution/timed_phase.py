"""The timing phase of a candidate's execution: `TimedPhase`, a base class of `Execution` (sandbox/execution/phases.py).

Timing (the heart of the integrity scheme, see docs/threat-model.md): every timed call gets inputs from
its own seed, drawn here with `secrets` and sent to the child only when its batch is armed, from a
distribution drawn at random for that call. A batch of such calls runs back to back (sandbox/child/timing.py);
its claim is its calls' mean. The parent computes fp64 truth and input fingerprints for every seed while
the child generates the inputs (never while a batch is timed), checks every timed output, and bounds what
the child claims with what it can see itself: the wall time of the batch's round trip, and the CPU time
the kernel accounted to the sandbox during it (sandbox/execution/plausibility.py).
"""

from __future__ import annotations

import dataclasses
import secrets
import statistics
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

import torch

from reference import Task
from sandbox.execution import cputime
from sandbox.execution import plausibility
from sandbox.execution import tracing
from sandbox.execution.making import made_on_device
from sandbox.profiling import clocks
from sandbox import protocol as msg
from sandbox.shared.compare import compare
from sandbox.execution.records import CallTruth, TimedCall, TimingDetails, _Stop
from sandbox.execution.timing import batch_size, plan_reps, summarize
from sandbox.shared.timing import lead_flushes
from sandbox.verdict import Performance, Status, TimingStats

if TYPE_CHECKING:
    pass


WARMUP_BATCHES = 1
"""Batches run, checked, and not counted: first-call costs (lazy initialisation, caches, JIT)."""
MIN_BATCHES = 4
"""Batches counted before the timing may stop early."""
TIMING_PRECISION = 0.005
"""Stop once the bootstrap 95% interval of the median batch mean is within +-0.5% of it (or at max_reps calls):
repetitions cost fresh inputs and fp64 truth each, so they are spent where they buy precision. Measured on
an H100, 2026-11-23: batch means of an honest kernel spread ~0.1-0.3%, so 4-6 batches usually suffice."""
ESTIMATE_TIMEOUT_FACTOR = 4
"""The estimate makes 4 calls (1 warm-up + 3 timed) on one input set."""
MAKE_HISTORY = 24
"""The parent's measurements of its own making of a distribution's inputs that `made_reference` takes the least of."""
TRACE_END_TIMEOUT_S = 120.0
"""Stopping the profiler and writing the last segment: a timing phase's records, a few MiB of JSON."""

T = TypeVar("T")


class TimedPhase:
    """`Execution`'s timing: the estimate, batches of calls until the median is precise enough, every output checked,
    and the figures and bounds of what the parent saw around each batch."""

    def timing(self, baselines: dict, details: dict[str, Any]) -> tuple[Performance, bool]:
        """Estimate, then batches of calls, each call with its own seed and distribution, every output checked,
        until the median batch mean is precise enough (TIMING_PRECISION) or max_reps calls were timed."""
        official = self.task.distributions[0]
        est, _ = self.ask(msg.Estimate(shape=list(self.shape), distribution=official, seed=secrets.randbits(62)),
                          msg.EstimateReply, "timing estimate", self.config.call_timeout_s * ESTIMATE_TIMEOUT_FACTOR)
        reps, _ = plan_reps(est.estimate_ms, self.config.timing_budget_ms, self.config.min_reps,
                            self.config.max_reps_on("cuda" if self.is_cuda else "cpu"))
        size = self.batch_size()
        (warm, timed), throttle = self.clocked(lambda: self.timed_batches(reps, size))
        clock_details: dict[str, Any] = {"check": throttle.as_dict(), "retimed": False}
        if throttle.throttled:  # a throttled card's time is not comparable: timed once more, fresh
            (warm, timed), again = self.clocked(lambda: self.timed_batches(reps, size))
            clock_details = {"check": again.as_dict(), "retimed": True, "first": throttle.as_dict()}
            if again.throttled:
                self.unranked_reason = f"the card was throttled during both timings: {again.detail}"
        breach = self.bounds_breach(timed)
        if breach:
            # The bounds read the host's clocks (wall windows, CPU time, a span the host's queueing shapes), which a
            # host loaded by other work (a burst's builds on the same cores) stretches as hidden work does. Timed
            # once more, fresh: hidden work breaches again; a passing load does not. Two honest cross_entropy kernels
            # were refused during a burst through `serve` on an H200 (2026-11-28), one judged correct in a smaller one.
            (warm, timed), again = self.clocked(lambda: self.timed_batches(reps, size))
            clock_details = {"check": again.as_dict(), "retimed": True, "first": clock_details["check"],
                             "first_breach": {"rule": breach.rule, "diagnosis": breach.diagnosis}}
            breach = self.bounds_breach(timed)
        self.check_trace(details)  # once, over every traced batch of both timings where there were two
        details["timing"] = dataclasses.asdict(self.timing_details(warm, timed, reps, size, clock_details))
        if breach:
            raise _Stop(Status.TAMPER_DETECTED, f"{breach.diagnosis} (in two timings)", rule=breach.rule,
                        **breach.details)
        device_type = torch.device(self.device).type
        claims = [b.claim_ms for b in timed]
        runs, empty_runs = self.call_runs(timed), self.call_runs(self.empty_calls)
        scale = plausibility.cpu_scale(claims, runs, empty_runs) if not self.is_cuda else 1.0
        details["timing"]["cpu_scale"] = scale
        ranked = [b.ranked_ms * scale for b in timed]
        stats = TimingStats(**{**summarize(ranked), "reps": details["timing"]["timed_calls"]})
        perf = _performance(self.task, self.shape, stats, baselines, self.peak_memory)
        breach = plausibility.speed_of_light(stats.median_ms, perf.min_bytes, perf.bandwidth_bytes_per_s, device_type)
        if breach:
            raise _Stop(Status.TAMPER_DETECTED, breach.diagnosis, rule=breach.rule, **breach.details)
        return perf, details["timing"]["hidden_work"]

    def bounds_breach(self, timed: list[TimedCall]) -> plausibility.Breach | None:
        """The first bound the timed batches breach (sandbox/execution/plausibility.py), or None."""
        device_type = torch.device(self.device).type
        claims, windows = [b.claim_ms for b in timed], [b.window_ms for b in timed]
        runs, empty_runs = self.call_runs(timed), self.call_runs(self.empty_calls)
        empty_windows = [c.window_ms for c in self.empty_calls]
        empty_window = min(empty_windows)
        # The empty batches made real inputs too (calibrate), so the windows and CPU times beyond theirs are the calls'.
        return (plausibility.timing_bound(claims, windows, runs, empty_runs, device_type,
                                          training=self.task.training is not None, empty_windows_ms=empty_windows)
                or plausibility.untimed_work_bound(claims, windows, empty_window, device_type)
                or plausibility.unexplained_wall([b.unexplained_ms for b in timed],
                                                 [c.unexplained_ms for c in self.empty_calls], windows, device_type)
                or plausibility.unattributed_work([b.excess_ms for b in timed], [b.judge_ms for b in timed], claims,
                                                  device_type, [b.flushes_ms for b in timed]))

    def timing_details(self, warm: list[TimedCall], timed: list[TimedCall], reps: int, size: int,
                       clocks_seen: dict[str, Any]) -> TimingDetails:
        """`details["timing"]`: what the parent saw around every timed batch, and the inputs of its bounds."""
        pool = self.timing_distributions()
        every = [d for b in (*warm, *timed) for d in b.distributions]
        runs = [b.run_ms for b in timed]
        empty_runs = [c.run_ms for c in self.empty_calls]
        calibration = self.calibration
        return TimingDetails(
            batch_size=size, timed_batches=len(timed), warmup_batches=len(warm),
            timed_calls=sum(b.calls for b in timed), warmup_calls=sum(b.calls for b in warm),
            planned_calls=reps,
            distributions={d: every.count(d) for d in pool},
            truth_checks=self.truth_checks,
            window_median_ms=statistics.median(b.window_ms for b in timed),
            run_median_ms=statistics.median(runs),
            empty_call_run_ms=statistics.median(empty_runs),
            empty_call_window_ms=min(c.window_ms for c in self.empty_calls),
            call_floor_ms=plausibility.call_floor_ms(
                self.call_runs(timed), self.call_runs(self.empty_calls),
                "cuda" if self.is_cuda else "cpu", [b.window_ms for b in timed],
                [c.window_ms for c in self.empty_calls]),
            # Where the CPU times came from (sandbox/execution/cputime.py), and how many batches' readings found
            # a thread of the sandbox still on a CPU after cputime.SETTLE_S.
            cpu_time_source=", ".join(sorted({b.cpu_source for b in (*self.empty_calls, *timed)})),
            cpu_readings_unsettled=sum(not b.settled for b in (*self.empty_calls, *timed)),
            arm_windows_ms=[round(b.arm_ms, 5) for b in timed],
            truth_ms=[round(b.truth_ms, 5) for b in timed],
            empty_arm_window_ms=min(c.arm_ms for c in self.empty_calls),
            made_ms=[round(b.made_ms, 5) for b in timed],
            judge_ms=[round(b.judge_ms, 5) for b in timed],
            unattributed_ms=[round(b.excess_ms, 5) for b in timed],
            gaps_ms=[round(b.gap_ms, 5) for b in timed],
            ranked_ms=[round(b.ranked_ms, 5) for b in timed],
            unexplained_ms=[round(b.unexplained_ms, 5) for b in timed],
            empty_unexplained_ms=statistics.median(c.unexplained_ms for c in self.empty_calls),
            lead_ms=calibration.lead_ms if calibration is not None else 0.0,
            flush_ms=calibration.flush_ms if calibration is not None else 0.0,
            speed_of_light_limit=plausibility.IMPLAUSIBLE_SOL_FRACTION["cuda" if self.is_cuda else "cpu"],
            claims_ms=[round(c, 5) for b in timed for c in b.claims_ms],
            batch_claims_ms=[round(b.claim_ms, 5) for b in timed],
            windows_ms=[round(b.window_ms, 5) for b in timed],
            runs_ms=[round(r, 5) for r in runs],
            # Whether the host clock decided the median: most batches saw more than their events. A flagged
            # batch is always claimed by the host's time, so hidden work buys nothing in any batch; one flagged
            # batch in several is a host that fell behind the device once (on the H100, 2026-11-25: honest
            # cross_entropy_fast, 1 batch of 7 at 1.37x, the others 1.07-1.11x), not a finding to report.
            hidden_work=host_decided(timed),
            # Which batches the host clock decided, and host over events for each (a stall: one batch a little
            # over; hidden work: every batch far over).
            hidden_work_batches=[i for i, b in enumerate(timed) if b.hidden_work],
            host_over_events=[round(b.host_ms / b.event_ms, 3) if b.event_ms else None for b in timed],
            clocks=clocks_seen)

    def clocked(self, timing: Callable[[], T]) -> tuple[T, clocks.ThrottleCheck]:
        """`timing()` between two readings of the card's clocks, and whether it was throttled meanwhile (unknown on
        the CPU and without NVML)."""
        card = self.config.clocks_index if self.config.clocks_index is not None else self.device
        before = clocks.read(card)
        result = timing()
        return result, clocks.check(before, clocks.read(card))

    def check_trace(self, details: dict[str, Any]) -> None:
        """Stop the kernel trace and judge it (sandbox/execution/tracing.py): `details["trace"]`, or tampering."""
        if self.trace_key is None:
            details["trace"] = {"status": "unavailable", "reason": self.trace_probe} if self.trace_probe else \
                {"status": "off"}
            return
        reply, _ = self.ask(msg.TraceEnd(), msg.TraceEndReply, "the end of the kernel trace", TRACE_END_TIMEOUT_S)
        assert isinstance(reply, msg.TraceEndReply) and self.work_dir is not None
        try:
            texts = tracing.read_segments(self.work_dir, reply.files)
        except tracing.TraceReadError as exc:
            texts, unreadable = [], str(exc)
        else:
            unreadable = ""
        if self.trace_probe != "available":  # the CPU, or a host whose profiler records no device work
            details["trace"] = {"status": "unavailable", "reason": self.trace_probe, "segments": len(texts),
                                "bytes": sum(len(t) for t in texts), "calls": self.traced_calls}
            return
        if unreadable or not texts:
            outcome = tracing.TraceOutcome("refused", rule="trace_cut", message=(
                f"the kernel trace is absent or unreadable after CUDA work ran ({unreadable or 'no segment'}"
                f"{'; the recorder said: ' + reply.recorder_error if reply.recorder_error else ''})"))
        else:
            outcome = tracing.judge(texts, self.trace_key, self.traced_batches, self.warmup_calls)
        details["trace"] = {**outcome.details, "status": outcome.status, "calls": self.traced_calls,
                            "segments": len(texts)}
        if outcome.refused:
            raise _Stop(Status.TAMPER_DETECTED, f"kernel trace: {outcome.message}", rule=outcome.rule,
                        trace=details["trace"])

    def timed_batches(self, reps: int, size: int) -> tuple[list[TimedCall], list[TimedCall]]:
        """(warm-up, timed) batches of `size` calls with fresh distributions, until the median batch mean is
        precise enough (TIMING_PRECISION, after MIN_BATCHES) or `reps` calls were timed."""
        pool = self.timing_distributions()
        first = self.traced_calls
        warm = [self.timed_batch(i, self.draw(pool, size)) for i in range(WARMUP_BATCHES)]
        self.warmup_calls.update(range(first, self.traced_calls))
        timed: list[TimedCall] = []
        while sum(b.calls for b in timed) < reps:
            timed.append(self.timed_batch(len(warm) + len(timed), self.draw(pool, size)))
            if len(timed) >= MIN_BATCHES and _precise(timed):
                break
        return warm, timed

    def timing_distributions(self) -> tuple[str, ...]:
        """Where each timed call's distribution is drawn from, uniformly and afresh per call (the task decides)."""
        return tuple(self.task.timed_distributions())

    @staticmethod
    def draw(pool: tuple[str, ...], size: int) -> tuple[str, ...]:
        return tuple(secrets.choice(pool) for _ in range(size))

    def batch_size(self) -> int:
        """Calls per timed batch (sandbox/execution/timing.py; a call's minimal bytes stand for its inputs' size)."""
        return batch_size(torch.device(self.device), self.task.min_bytes(self.shape))

    def timed_batch(self, index: int, distributions: tuple[str, ...], *, empty: bool = False) -> TimedCall:
        """The parent's truth for a fresh seed per call -> arm (the window's buffers) -> go (each call's inputs made
        in the child just before it, the batch timed by both clocks) -> inspect; every call's output checked against
        the parent's fp64 truth for its own seed. No seed reaches the child before `go`."""
        assert self.session is not None
        step = f"{'empty ' if empty else ''}timed batch {index}"
        seeds = [secrets.randbits(62) for _ in distributions]
        n = len(distributions)
        timeout = self.config.call_timeout_s * n
        if not empty and self.trace_key is not None:
            self.traced_batches.append(n)  # before `go`: a batch cut short still ran its canaries
        if self.meter is None or self.meter.root_pid != self.session.process.pid:
            self.meter = cputime.Meter(self.session.process.pid, self.session.process.cgroup)
        truth_started = time.perf_counter()
        truths = [] if empty else [self.call_truth(self.shape, d, seed, timed=True)
                                   for d, seed in zip(distributions, seeds)]
        truth_ms = (time.perf_counter() - truth_started) * 1e3
        own_makes_ms = () if self.is_cuda else self.own_making_ms(distributions, seeds, truths)
        arm_started = time.perf_counter()
        self.ask(self.arm_command(n, empty), msg.ArmReply, step, timeout)
        arm_ms = (time.perf_counter() - arm_started) * 1e3
        go = msg.Go(shape=list(self.shape), calls=[msg.ArmedCall(distribution=d, seed=seed)
                                                   for d, seed in zip(distributions, seeds)])
        ran = self.meter.read()
        started = time.perf_counter()
        raw = self.session.request(go.model_dump(), timeout)
        window_ms = (time.perf_counter() - started) * 1e3
        done = self.meter.read()
        went, _ = self.read(raw, msg.GoReply, step)
        if went.rejected_output:
            raise _Stop(Status.INCORRECT, f"{step}: {went.rejected_output}")
        assert isinstance(went, msg.GoReply)
        if (len(raw.payloads) != n or len(went.times_ms) != n or went.made_ms < 0
                or (self.is_cuda and len(went.gaps_ms) != n - 1) or not all(v >= 0 for v in went.gaps_ms)):
            raise _Stop(Status.TAMPER_DETECTED, f"{step}: {len(raw.payloads)} outputs, {len(went.times_ms)} times and "
                        f"{len(went.gaps_ms)} gaps for {n} calls (a forged reply)", rule="protocol")
        outs = [self.output(went, [payload], step) for payload in raw.payloads]
        inspected, _ = self.read(self.session.request(msg.Inspect().model_dump(), timeout), msg.InspectReply, step)
        batch = self.measured(went, truths, n, window_ms=window_ms, run_ms=done.since(ran) / 1e6, arm_ms=arm_ms,
                              truth_ms=truth_ms, distributions=distributions, own_makes_ms=own_makes_ms,
                              cpu_source=done.source, settled=ran.settled and done.settled)
        if empty:
            return batch
        if len(inspected.after_all) != n:
            raise _Stop(Status.TAMPER_DETECTED, f"{step}: inputs of {len(inspected.after_all)} calls inspected, "
                        f"{n} were run (a forged reply)", rule="protocol")
        for i, (truth, after, out) in enumerate(zip(truths, inspected.after_all, outs)):
            if after != truth.prints:
                raise _Stop(Status.INCORRECT, f"{step}, call {i}: {self.modified_inputs} (or its inputs were made "
                            "otherwise than the judge's generator makes them)")
            cmp = compare(out, truth.output, self.task.tolerance.atol, self.task.tolerance.rtol)
            if not cmp.passed:
                raise _Stop(Status.INCORRECT, f"timed call {index * n + i} returned a wrong result ({distributions[i]} "
                            f"inputs, {step}; {cmp.message}): results must be computed on every call from that call's "
                            "inputs, not cached, deferred or estimated")
            self.check_timed_call(f"timed call {index * n + i} ({distributions[i]} inputs, {step})", i, truth)
        self.record_peak(inspected.peak_memory_bytes, n)
        return batch

    def measured(self, went: msg.GoReply, truths: list[CallTruth], n: int, **seen: Any) -> TimedCall:
        """One batch in per-call figures: what the child claims, what the parent saw, the judge's own work inside the
        round trip, and what the batch ranks (sandbox/execution/plausibility.py, `ranked_claim`)."""
        judge_ms = sum(self.made_reference(d, t.make_ms) for d, t in zip(seen["distributions"], truths)) / n
        made_ms = went.made_ms / n
        excess_ms, own = 0.0, 0.0
        calibration = self.calibration
        if self.is_cuda and calibration is not None and truths:
            own = self.own_flushes_ms(n)
            excess_ms = made_ms - own - judge_ms
            if plausibility.too_short(excess_ms, own + judge_ms):
                raise _Stop(Status.TAMPER_DETECTED, "the child reports its span before the calls as "
                            f"{went.made_ms:.4f} ms, but its flushes and the making of the inputs alone take "
                            f"{n * (own + judge_ms):.4f} ms on this device (the judge made the same inputs and timed "
                            "that): a forged reply", rule="protocol")
            excess_ms -= self.empty_span_excess_ms(judge_ms)
        flush_ms = calibration.flush_ms if calibration is not None else 0.0
        gap_ms = sum(g - flush_ms for g in went.gaps_ms) / max(len(went.gaps_ms), 1)
        run_ms, window_ms = seen.pop("run_ms") / n, seen.pop("window_ms") / n
        ranked = plausibility.ranked_claim(went.time_ms, device_type="cuda" if self.is_cuda else "cpu",
                                           excess_ms=excess_ms, make_ms=judge_ms, flushes_ms=own)
        return TimedCall(distribution=seen["distributions"][0], claim_ms=went.time_ms, window_ms=window_ms,
                         run_ms=run_ms, hidden_work=went.hidden_work, calls=n, claims_ms=tuple(went.times_ms),
                         distributions=seen["distributions"], host_ms=went.host_ms / n, event_ms=went.event_ms,
                         arm_ms=seen["arm_ms"] / n, truth_ms=seen["truth_ms"] / n, cpu_source=seen["cpu_source"],
                         settled=seen["settled"], made_ms=made_ms, judge_ms=judge_ms, flushes_ms=own,
                         excess_ms=excess_ms, gap_ms=gap_ms, ranked_ms=ranked,
                         unexplained_ms=window_ms - (went.made_ms + sum(went.times_ms) + sum(went.gaps_ms)) / n,
                         own_makes_ms=seen["own_makes_ms"])

    def own_flushes_ms(self, n: int) -> float:
        """GPU: the device time of a batch's own flushes (its lead and the one before the first call), per call."""
        calibration = self.calibration
        assert calibration is not None
        flushes = lead_flushes(calibration.lead_ms, calibration.make_host_ms, n, calibration.flush_ms) + 1
        return flushes * calibration.flush_ms / n

    def empty_span_excess_ms(self, judge_ms: float) -> float:
        """GPU: what the span before an empty batch's calls held beyond the judge's own work in it (`judge_ms`, and its
        flushes), per call: the median over the empty batches, which ran before the candidate existed and make the same
        inputs through the same lead. It is the harness's own share of that span (the device waiting on the host
        between the makings and the first call), which no candidate caused, so a timed batch is charged only beyond
        it: honest cross_entropy_fast on an H200 (2026-11-28) held 0.021-0.026 ms a call beyond the judge's work,
        7% of its making, which the making's allowance alone charged (+5% on its ranked median). Measured on a spare,
        only while no candidate's stage is on the device (sandbox/execution/device_gate.py): beside one, it read up to
        1 ms a call long and left that much uncharged. Never below zero."""
        spans = [c.made_ms - self.own_flushes_ms(c.calls) for c in self.empty_calls]
        return max(0.0, statistics.median(spans) - judge_ms) if spans else 0.0

    def own_making_ms(self, distributions: tuple[str, ...], seeds: list[int],
                      truths: list[CallTruth]) -> tuple[float, ...]:
        """CPU: the parent thread's CPU time making each call's inputs (sandbox/execution/making.py), from the truths
        just computed (kept for `call_runs`' caps), or, for an empty batch (no truths), by making them here and
        dropping them (the calibration keeps those, in its batches)."""
        if not truths:
            device = torch.device(self.device)
            return tuple(made_on_device(lambda d=d, s=s: self.task.make_inputs(self.shape, d, s, device), device)[1]
                         for d, s in zip(distributions, seeds))
        makes = tuple(t.make_ms or 0.0 for t in truths)
        self.own_makings.extend(zip(distributions, makes))
        return makes

    def call_runs(self, batches: Sequence[TimedCall]) -> list[float]:
        """Each batch's CPU time per call less the judge's own making in it, every call's making capped by every making
        the parent measured for this candidate and in the calibration (plausibility.making_caps): one spike of the
        parent's reading is not work the candidate is relieved of."""
        caps = plausibility.making_caps([*((d, ms) for c in self.empty_calls
                                           for d, ms in zip(c.distributions, c.own_makes_ms)), *self.own_makings])
        return [b.call_run_ms(caps) for b in batches]

    # --- what a training task changes (sandbox/execution/training.py overrides these) -----------------------------

    def arm_command(self, calls: int, empty: bool) -> msg.Arm:
        return msg.Arm(calls=calls, shape=list(self.shape), null=empty)

    def made_reference(self, distribution: str, make_ms: float | None) -> float:
        """The device time making one call's inputs of `distribution` takes on this device: the least of the parent's
        own measurements for this candidate (MAKE_HISTORY of them). One measurement alone can carry the parent's host
        falling behind its device (another thread holding the interpreter lock: the worker runs several), which only
        lengthens it; the device's own time for the same kernels varies by 0.35% (H100,
        docs/results/inputs-h100-2026-11-28.md), about the spread between seeds, so the least is that time."""
        history = self.makes_ms.setdefault(distribution, [])
        if make_ms is not None:
            history.append(make_ms)
            del history[:-MAKE_HISTORY]
        return min(history) if history else 0.0

    def check_timed_call(self, label: str, position: int, truth: CallTruth) -> None:
        """Checks of one timed call beyond its output and inputs (`position` in its batch); none for a forward."""

    def record_peak(self, batch_peak: int | None, calls: int) -> None:
        """The most device memory a call allocated beyond its inputs: a forward batch keeps only the calls'
        outputs alive, so the batch's peak is a call's (to within the earlier outputs)."""
        if batch_peak is not None:
            self.peak_memory = max(self.peak_memory or 0, batch_peak)


def host_decided(batches: list[TimedCall]) -> bool:
    """Whether most timed batches were claimed by the host clock (hidden work decided the median)."""
    return 2 * sum(b.hidden_work for b in batches) > len(batches)


def _precise(batches: list[TimedCall]) -> bool:
    """Whether the bootstrap 95% interval of the median batch mean is within TIMING_PRECISION of the median."""
    stats = summarize([b.ranked_ms for b in batches])
    low, high = stats["ci95_ms"]
    return stats["median_ms"] > 0 and (high - low) / 2 <= TIMING_PRECISION * stats["median_ms"]


def _performance(task: Task, shape: tuple[int, ...], stats: TimingStats, baselines: dict,
                 peak: int | None) -> Performance:
    base_stats = {name: TimingStats(**values) for name, values in baselines.get("baselines", {}).items()}
    bandwidth = baselines.get("bandwidth_bytes_per_s")
    min_bytes = task.min_bytes(shape)
    sol = plausibility.speed_of_light_fraction(stats.median_ms, min_bytes, bandwidth)
    return Performance(
        candidate=stats,
        baselines=base_stats,
        speedups={name: b.median_ms / stats.median_ms for name, b in base_stats.items()},
        min_bytes=min_bytes,
        bandwidth_bytes_per_s=bandwidth,
        speed_of_light_fraction=sol,
        peak_memory_bytes=peak,
        reference_peak_memory_bytes=baselines.get("reference_peak_memory_bytes"),
    )
