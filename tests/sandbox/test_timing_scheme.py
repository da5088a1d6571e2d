"""The timing scheme: fresh inputs per timed call, typed messages, and the bounds on what a child may claim.

The rule tests run on numbers; the judging tests run the real judge (C++ builds, an isolated child,
fp64 truth in this process), once with the host's CPUs saturated by busy processes.
"""

from __future__ import annotations

import json
import math
import os
import re
import signal
import statistics
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest
import torch

from sandbox import Status, judge
from sandbox.config import JudgeConfig
from sandbox.execution.records import TimedCall
from sandbox.execution.timed_phase import host_decided
from sandbox import protocol as msg
from sandbox.child import timing
from sandbox.shared import timing as shared_timing
from sandbox.child.timing import DeviceClock, time_batch
from sandbox.execution.plausibility import (
    IMPLAUSIBLE_SOL_FRACTION,
    MIN_CLAIM_FRACTION,
    MIN_CLAIM_FRACTION_TRAINING,
    RUN_NOISE_MS,
    UNATTRIBUTED_FLUSH_FRACTION,
    UNATTRIBUTED_SLACK_FRACTION,
    UNATTRIBUTED_SLACK_MS,
    call_floor_ms,
    cpu_scale,
    ranked_claim,
    speed_of_light,
    timing_bound,
    unattributed_charge,
    unattributed_work,
    unexplained_wall,
)

from .conftest import CORPUS, corpus_meta

HERE = Path(__file__).resolve().parent
CONTROL = CORPUS / "hostile" / "cpu" / "control_cpp_log_then_reduce.py"
BUSY_PROCESSES = 3
"""More busy loops than this machine's 2 cores (CI has 2): every process, the judge's included, waits its turn."""


# --- messages at the boundary --------------------------------------------------------------------

GO = {"op": "go", "ok": True, "dtype": "float32", "shape": [], "time_ms": 0.3, "event_ms": None, "host_ms": 0.3,
      "hidden_work": False, "payload_sizes": [4]}


def test_a_well_formed_reply_is_typed() -> None:
    reply = msg.parse_reply(GO, msg.GoReply)
    assert isinstance(reply, msg.GoReply) and reply.time_ms == 0.3 and reply.tampered == []


@pytest.mark.parametrize("change", [
    {"time_ms": "0.3"},                 # a string where a number belongs
    {"time_ms": None},
    {"shape": [-1]},
    {"tampered": "x"},                  # a string where a list belongs
    {"unexpected": 1},                  # a field no model declares
    {"op": "trial"},                    # the answer to another command
])
def test_a_malformed_reply_is_a_protocol_error(change: dict) -> None:
    with pytest.raises(msg.ProtocolError, match="malformed GoReply"):
        msg.parse_reply({**GO, **change}, msg.GoReply)


def test_a_failed_step_parses_as_a_plain_reply_with_its_error() -> None:
    reply = msg.parse_reply({"op": "go", "ok": False, "error": {"type": "ValueError", "message": "boom"}}, msg.GoReply)
    assert type(reply) is msg.Reply and reply.error is not None and reply.error.type == "ValueError"


def test_commands_round_trip() -> None:
    arm = msg.Arm(calls=3, shape=[64, 512])
    assert msg.parse_command(json.loads(json.dumps(arm.model_dump()))) == arm
    go = msg.Go(shape=[64, 512], calls=[msg.ArmedCall(distribution="planted", seed=7)])
    assert msg.parse_command(json.loads(json.dumps(go.model_dump()))) == go


def test_arm_carries_no_seed_and_no_distribution() -> None:
    """Issue 39: a batch's inputs must not exist in the child before `go`, so nothing it is sent before `go` says what
    they will be."""
    assert set(msg.Arm.model_fields) == {"op", "calls", "shape", "null", "forward_only"}
    with pytest.raises(ValueError):
        msg.parse_command({"op": "arm", "calls": 1, "shape": [4, 4], "seed": 7})


# --- the rules, on numbers -----------------------------------------------------------------------

EMPTY_RUNS = [0.38, 0.40, 0.41]
"""CPU time of an empty call's round trip, as measured on the 2-core test machine (load average ~9)."""
HARNESS_MS = 0.39


def honest(claim: float, n: int = 100) -> tuple[list[float], list[float], list[float]]:
    """(claims, windows, runs) of honest calls on a saturated host: the claims vary by a few percent, the
    CPU time is the call plus the harness's part, the wall windows carry 10 ms of waiting for a CPU."""
    claims = [claim * (1 + 0.02 * (i % 5)) for i in range(n)]
    runs = [c + HARNESS_MS + 0.01 * (i % 3) for i, c in enumerate(claims)]
    windows = [r + 10.0 for r in runs]
    return claims, windows, runs


@pytest.mark.parametrize("claim_ms", [0.05, 0.3, 0.7, 4.0])
def test_honest_claims_on_a_saturated_host_pass(claim_ms: float) -> None:
    assert timing_bound(*honest(claim_ms), EMPTY_RUNS) is None


@pytest.mark.parametrize(("claim_ms", "factor"), [(0.3, 6.0), (0.7, 4.5), (4.0, 3.5)])
def test_understated_claims_are_caught(claim_ms: float, factor: float) -> None:
    """On the CPU (MIN_CLAIM_FRACTION 0.3): a 4 ms call understated 3.5x, 0.7 ms 4.5x, a 0.3 ms call 6x
    (RUN_NOISE_MS and the harness's share weigh there); a smaller understatement is ranked at the floor
    (`cpu_scale`)."""
    claims, windows, runs = honest(claim_ms)
    breach = timing_bound([c / factor for c in claims], windows, runs, EMPTY_RUNS)
    assert breach is not None and breach.rule == "timing" and "far below" in breach.diagnosis


def test_the_understatement_the_rule_lets_through_is_what_its_constants_say() -> None:
    """A median claim passes from MIN_CLAIM_FRACTION * floor up, and not below."""
    _, windows, runs = honest(4.0)
    floor = call_floor_ms(runs, EMPTY_RUNS)
    assert floor == pytest.approx(statistics.median(runs) - statistics.median(EMPTY_RUNS) - RUN_NOISE_MS)
    for device in ("cpu", "cuda"):
        limit = MIN_CLAIM_FRACTION[device] * floor
        assert timing_bound([limit * 1.01] * 100, windows, runs, EMPTY_RUNS, device) is None
        assert timing_bound([limit * 0.99] * 100, windows, runs, EMPTY_RUNS, device) is not None


@pytest.mark.parametrize(("claim", "run", "empty", "caught_at"), [
    # docs/results/timing-bound-h100-2026-11-23.log: 16 busy loops (three rows) and idle (the last)
    (0.7311, 1.1846, 0.2784, 2.0), (0.1940, 0.4237, 0.1872, 2.5), (1.0022, 1.3444, 0.2090, 2.0),
    (0.7259, 1.1649, 0.3981, 2.0),
    # the evening run on pre-started children, with the host compiling (docs/results/acceptance-h100-warm-...):
    # cross_entropy_fast (flagged then, at batch 8, when RUN_NOISE_MS was spread over a batch), _online, kl_div_fused
    (0.1939, 0.4742, 0.1590, 2.5), (0.1955, 0.4641, 0.1690, 2.5), (0.7431, 1.2934, 0.2273, 2.0)])
def test_the_gpu_rule_passes_the_honest_kernels_measured_on_an_h100_under_load(claim, run, empty, caught_at) -> None:
    """Honest H100 figures pass; the same understated `caught_at` times are caught (a 0.19 ms call spends about
    as long in the host's harness as on the device, so there the rule needs a larger lie to be sure)."""
    args = ([run + 1] * 20, [run] * 20, [empty] * 10, "cuda")
    assert timing_bound([claim] * 20, *args) is None
    assert timing_bound([claim / caught_at] * 20, *args) is not None


@pytest.mark.parametrize(("claim", "run", "empty"), [
    (1.2672, 2.6223, 0.3737), (0.7497, 1.7593, 0.3759),  # kl_div_train _fused / _function, the forward alone
    (1.9774, 3.1721, 0.3737), (1.8938, 3.0067, 0.3759)])  # the same, the step
def test_the_training_rule_passes_the_honest_training_kernels_measured_on_an_h100(claim, run, empty) -> None:
    """The training variants' H100 figures (batch 1): the forward rule flagged the forward alone of both; the
    training fraction passes them and still catches a claim understated 2.5 times."""
    args = ([run + 1] * 20, [run] * 20, [empty] * 10, "cuda")
    assert timing_bound([claim] * 20, *args, training=True) is None
    assert timing_bound([claim / 2.5] * 20, *args, training=True) is not None
    assert MIN_CLAIM_FRACTION_TRAINING["cuda"] < MIN_CLAIM_FRACTION["cuda"]


@pytest.mark.parametrize(("claim", "floor"), [
    # the full suite beside one busy loop on the 2-core machine (2026-11-27), each flagged by the 0.6 this was:
    # cross_entropy_train_cpp_function, kl_div_train_cpp_function, kl_div_train_cpp_fused, the forward alone
    (0.7270, 1.2329), (1.0270, 1.9035), (1.1203, 2.0652)])
def test_the_training_rule_passes_the_honest_cpu_forward_alone_measured_under_load(claim, floor) -> None:
    """The CPU's forward alone is a ~1 ms call beside the judge's per-call training work, its ratio the lowest of
    all: the training fraction passes these honest figures and catches the same claims understated 2.5 times."""
    empty = 0.3
    args = ([floor + empty + RUN_NOISE_MS + 5] * 20, [floor + empty + RUN_NOISE_MS] * 20, [empty] * 10, "cpu")
    assert call_floor_ms(args[1], args[2]) == pytest.approx(floor)
    assert timing_bound([claim] * 20, *args, training=True) is None
    assert timing_bound([claim / 2.5] * 20, *args, training=True) is not None
    assert MIN_CLAIM_FRACTION_TRAINING["cpu"] <= MIN_CLAIM_FRACTION["cpu"]


def test_a_claim_above_its_own_window_is_caught() -> None:
    claims, windows, runs = honest(0.5)
    claims[7] = windows[7] + 1.0
    breach = timing_bound(claims, windows, runs, EMPTY_RUNS)
    assert breach is not None and "timed call 7" in breach.diagnosis


def test_speed_of_light() -> None:
    floor_ms = 2.0  # 2e9 bytes at 1e12 B/s
    assert speed_of_light(floor_ms / 0.99, 2_000_000_000, 1e12, "cuda") is None
    assert speed_of_light(floor_ms / (IMPLAUSIBLE_SOL_FRACTION["cuda"] * 0.99), 2_000_000_000, 1e12, "cuda") is None
    breach = speed_of_light(floor_ms / 3.4, 2_000_000_000, 1e12, "cuda")
    assert breach is not None and breach.rule == "implausible_speed" and "3.40x" in breach.diagnosis
    assert speed_of_light(0.001, 2_000_000_000, None, "cpu") is None  # no bandwidth measured: no rule


# --- work done while the judge makes the inputs (issue 39) ---------------------------------------

KL_MAKE_MS = 4.82
"""Making planted kl_div inputs on an H100 (docs/results/inputs-h100-2026-11-28.md)."""


def test_an_honest_span_before_a_call_is_charged_nothing() -> None:
    """The child's span from a call's lead to its start is its flushes and the making, to within noise."""
    for noise in (-0.02, 0.0, 0.03):
        assert unattributed_charge(noise, KL_MAKE_MS) == 0.0
        assert ranked_claim(0.72, device_type="cuda", excess_ms=noise, make_ms=KL_MAKE_MS) == 0.72


def test_work_done_while_the_inputs_are_made_is_charged_to_the_call() -> None:
    """A hook that does the call's work while its inputs are made (0.7 ms of it) moves nothing out of what ranks: the
    call is charged all of it but the slack."""
    slack = UNATTRIBUTED_SLACK_MS + UNATTRIBUTED_SLACK_FRACTION * KL_MAKE_MS
    ranked = ranked_claim(0.02, device_type="cuda", excess_ms=0.70, make_ms=KL_MAKE_MS)
    assert slack < 0.2 * 0.72, "the slack leaves a small share of a kl_div call free, not most of it"
    assert ranked == pytest.approx(0.02 + 0.70 - slack)
    assert ranked >= 0.72 - slack


CE_MAKE_MS, CE_FLUSHES_MS = 0.31, 1.2
"""A cross_entropy call on an H200: making its inputs, and its batch's own flushes per call (a batch of 8 spans ~1.5 ms
a call before its first call, docs/results/ab-integrity-h200-2026-11-29.md)."""


def test_a_span_whose_flushes_drifted_since_the_calibration_is_charged_nothing() -> None:
    """Honest cross_entropy spans on an H200 ran up to 0.025 ms a call over a quietly calibrated reference, most of
    it the lead's flushes running slower than at the calibration: the allowance follows the flushes measured, so that
    drift (under 1% of them) is not charged, while the making's allowance alone would have charged it."""
    drift = 0.025
    assert unattributed_charge(drift, CE_MAKE_MS) > 0.0  # the making's allowance alone: charged by noise
    assert unattributed_charge(drift, CE_MAKE_MS, CE_FLUSHES_MS) == 0.0
    assert ranked_claim(0.143, device_type="cuda", excess_ms=drift, make_ms=CE_MAKE_MS,
                        flushes_ms=CE_FLUSHES_MS) == 0.143
    # Proportional to the flushes, not a wider constant: a batch with no lead has only the making's allowance.
    assert unattributed_charge(drift, CE_MAKE_MS, 0.0) == unattributed_charge(drift, CE_MAKE_MS)
    more = unattributed_charge(0.2, CE_MAKE_MS, CE_FLUSHES_MS) - unattributed_charge(0.2, CE_MAKE_MS, 2 * CE_FLUSHES_MS)
    assert more == pytest.approx(UNATTRIBUTED_FLUSH_FRACTION * CE_FLUSHES_MS)


def test_work_hidden_behind_the_flushes_is_still_charged_all_but_the_allowance() -> None:
    """A hook doing a cross_entropy call's work (0.14 ms) while the inputs are made gains at most the allowance: under a
    quarter of the call."""
    slack = (UNATTRIBUTED_SLACK_MS + UNATTRIBUTED_SLACK_FRACTION * CE_MAKE_MS
             + UNATTRIBUTED_FLUSH_FRACTION * CE_FLUSHES_MS)
    ranked = ranked_claim(0.005, device_type="cuda", excess_ms=0.14, make_ms=CE_MAKE_MS, flushes_ms=CE_FLUSHES_MS)
    assert ranked == pytest.approx(0.005 + 0.14 - slack)
    assert slack < 0.25 * 0.143
    breach = unattributed_work([0.70] * 5, [CE_MAKE_MS] * 5, [0.02] * 5, "cuda", [CE_FLUSHES_MS] * 5)
    assert breach is not None and breach.rule == "unattributed_work"


def test_the_call_s_work_done_before_it_is_refused_outright() -> None:
    breach = unattributed_work([0.70] * 5, [KL_MAKE_MS] * 5, [0.02] * 5, "cuda")
    assert breach is not None and breach.rule == "unattributed_work"
    assert "while it made the timed calls' inputs" in breach.diagnosis
    assert unattributed_work([0.03] * 5, [KL_MAKE_MS] * 5, [0.72] * 5, "cuda") is None
    assert unattributed_work([0.70] * 5, [0.0] * 5, [0.02] * 5, "cpu") is None, "the CPU's rule is cpu_scale"
    # Half the batches hiding work leave the median batch honest, and those batches ranked with their charge.
    assert unattributed_work([0.70] * 2 + [0.0] * 3, [KL_MAKE_MS] * 5, [0.72] * 5, "cuda") is None


def test_the_parents_reference_for_making_inputs_is_its_least_measurement() -> None:
    """A measurement the parent's own host held up (another thread holding the interpreter lock) reads long; the least
    of the candidate's measurements is the device's time, so one slow reading neither charges nor excuses a batch."""
    from reference import get_task
    from sandbox.config import JudgeConfig
    from sandbox.execution.phases import Execution

    run = Execution(task=get_task("kl_div"), device="cpu", config=JudgeConfig(), shape=(8, 64), stages={})
    assert run.made_reference("planted", 4.83) == 4.83
    assert run.made_reference("planted", 9.7) == 4.83, "a held-up reading is not the reference"
    assert run.made_reference("planted", 4.81) == 4.81
    assert run.made_reference("official", None) == 0.0, "nothing measured for a distribution: no reference"


def test_event_readings_scaled_down_leave_the_parents_wall_clock_unexplained() -> None:
    """A native patch of cudaEventElapsedTime (through the GOT) scales every span the child reports; the parent's wall
    window then holds device time no span accounts for. Honest spans leave only the round trip's own share, as an
    empty batch's do (the figures: an H100's kl_div batches, ~7.7 ms of window a call, ~0.45 ms of it the host's)."""
    windows = [7.7] * 10
    honest = [0.45, 0.47, 0.44, 0.46, 0.45, 0.48, 0.45, 0.46, 0.44, 0.47]
    empty = [0.42] * 10
    assert unexplained_wall(honest, empty, windows, "cuda") is None
    scaled = [u + 0.3 * (7.7 - u) for u in honest]  # every span read at 0.7 of its length
    breach = unexplained_wall(scaled, empty, windows, "cuda")
    assert breach is not None and breach.rule == "timing" and "under-report" in breach.diagnosis
    assert unexplained_wall(scaled, empty, windows, "cpu") is None, "no device spans on the CPU"


def test_cpu_claims_below_the_parents_accounting_are_scaled_up_to_it() -> None:
    """A child whose clock runs at 0.7 (a patched `clock_gettime`) claims 0.7 of each call; what ranks is what the
    kernel accounted. Honest claims (the host clock counts waiting for a CPU too) stay as they are."""
    empty = [3.0, 3.1, 3.2]
    runs = [3.1 + 1.0 + RUN_NOISE_MS + 0.01 * (i % 3) for i in range(30)]  # a 1 ms call's CPU time
    assert cpu_scale([1.0 * 0.7] * 30, runs, empty) == pytest.approx(1 / 0.7, rel=0.02)
    assert cpu_scale([1.1] * 30, runs, empty) == 1.0
    assert cpu_scale([1.0] * 30, runs, []) == 1.0, "no empty batches: nothing to compare with"


# --- the real judge ---------------------------------------------------------------------------------

@pytest.fixture
def saturated_cpus():
    """BUSY_PROCESSES pure-Python busy loops, each bounded by `timeout` should this test die.

    Each in a session of its own, killed as a group: killing `timeout` alone left its busy loop running for
    the rest of the test run (three spinners on two cores, found by the suite's durations)."""
    procs = [subprocess.Popen(["timeout", "300", sys.executable, "-c", "while True: pass"], start_new_session=True)
             for _ in range(BUSY_PROCESSES)]
    try:
        yield
    finally:
        for proc in procs:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def test_the_cpu_times_at_most_cpu_max_reps_calls_and_a_gpu_max_reps() -> None:
    config = JudgeConfig(max_reps=100, cpu_max_reps=30)
    assert config.max_reps_on("cpu") == 30 and config.max_reps_on("cuda") == 100
    assert replace(config, max_reps=12).max_reps_on("cpu") == 12  # an operator's lower max_reps still holds


def test_honest_control_is_correct_while_the_cpus_are_saturated(judge_config, saturated_cpus) -> None:
    """The control misjudged under load before (tamper_detected); with every CPU busy it must be correct,
    and the details must say what the timing scheme did. With the judge's default `max_reps` (a GPU's): the CPU
    plans `cpu_max_reps` calls."""
    config = replace(judge_config, max_reps=JudgeConfig().max_reps)
    verdict = judge("kl_div", CONTROL.read_text(), "cpu", config=config)
    assert verdict.status is Status.CORRECT, verdict.diagnosis
    timing = verdict.details["timing"]
    assert config.max_reps > config.cpu_max_reps == timing["planned_calls"], timing["planned_calls"]
    calls = timing["timed_calls"] + timing["warmup_calls"]
    assert timing["scheme"].startswith("fresh seed per call") and sum(timing["distributions"].values()) == calls
    assert timing["batch_size"] == 1, "on the CPU a flush cannot overlap a call: one call per batch"
    assert len(timing["claims_ms"]) == timing["timed_calls"] == timing["timed_batches"]
    assert set(timing["distributions"]) == {"planted"}, "every timed call is drawn from the shortcut-proof one"
    # Every trial, timed call and extra shape had its own truth computed by the parent.
    assert timing["truth_checks"] == len(verdict.trials) + calls
    assert verdict.details["cost"]["truth_checks"] == timing["truth_checks"] + len(verdict.extra_shapes)
    assert {"start", "calibration", "load", "correctness", "timing"} <= set(verdict.stages)


def test_a_time_forged_on_the_result_channel_is_caught_by_the_judges_clock(judge_config) -> None:
    path = HERE / "candidates" / "forged_go_reply.py"
    meta = corpus_meta(path)
    verdict = judge(meta["task"], path.read_text(), "cpu", config=judge_config)
    assert verdict.status.value == meta["expect"], verdict.diagnosis
    assert verdict.details.get("rule") == "timing" and "far below" in verdict.diagnosis, verdict.diagnosis


def test_a_time_below_speed_of_light_is_not_a_score(judge_config, tmp_path) -> None:
    """The honest control, judged against a device whose measured bandwidth is made 1000x lower: its real
    time is then far below the memory floor, and that must end as implausible_speed, not a score."""
    verdict = judge("kl_div", CONTROL.read_text(), "cpu", config=judge_config)
    assert verdict.status is Status.CORRECT, verdict.diagnosis
    cache = json.loads((judge_config.cache_root / "baselines.json").read_text())
    for entry in cache.values():
        entry["bandwidth_bytes_per_s"] /= 1000
    slow = replace(judge_config, cache_root=tmp_path)
    (tmp_path / "baselines.json").write_text(json.dumps(cache))
    verdict = judge("kl_div", CONTROL.read_text(), "cpu", config=slow)
    assert verdict.status is Status.TAMPER_DETECTED, verdict.diagnosis
    assert verdict.details["rule"] == "implausible_speed", verdict.diagnosis
    assert verdict.performance is None, "an implausible time must not reach a leaderboard"


def test_work_hidden_in_the_making_of_inputs_is_tamper(judge_config) -> None:
    """A hook that would run candidate code while the judge makes a timed call's inputs is refused."""
    path = HERE / "candidates" / "precompute_while_inputs_are_made.py"
    meta = corpus_meta(path)
    verdict = judge(meta["task"], path.read_text(), "cpu", config=judge_config)
    assert verdict.status.value == meta["expect"], verdict.diagnosis
    assert re.search(meta["diagnosis"], verdict.diagnosis) and verdict.details.get("rule") == "integrity"


def test_a_batch_is_claimed_by_its_mean_so_work_moved_between_its_calls_still_counts() -> None:
    """A candidate can find every input set of a batch and do all the work in its first call; the batch's
    claim is its mean, which moving work between calls does not change."""
    clock = DeviceClock(torch.device("cpu"))
    data = torch.rand(200_000)

    def heavy() -> object:
        return [data.exp().sum() for _ in range(8)]

    batch = time_batch(clock, [heavy, lambda: None, lambda: None, lambda: None])
    assert batch.times_ms[0] > 20 * max(batch.times_ms[1:]), batch.times_ms
    assert batch.mean_ms == pytest.approx(sum(batch.times_ms) / 4)
    assert batch.mean_ms > 5 * statistics.median(batch.times_ms), "the median would have hidden the work"


def _gpu_stand_ins(monkeypatch, log: list) -> None:
    """No GPU here: the CUDA primitives `time_cuda_batch` calls become stand-ins that log what the batch queues
    (each event pair reads 1 ms, or 0.09 ms for each flush when only flushes lie between them)."""
    class Event:
        def __init__(self, enable_timing: bool = False) -> None:
            self.at = -1

    def record(event: Event) -> None:
        event.at = len(log)
        log.append("event")

    def elapsed(start: Event, end: Event) -> float:
        between = log[start.at + 1:end.at]
        return 0.09 * len(between) if between and set(between) == {"flush"} else 1.0

    monkeypatch.setattr(timing, "_Event", Event)
    monkeypatch.setattr(timing, "_record", record)
    monkeypatch.setattr(timing, "_elapsed_time", elapsed)
    monkeypatch.setattr(timing, "_cuda_synchronize", lambda device: log.append("sync"))


def _gpu_clock(monkeypatch, log: list, **kwargs: float) -> DeviceClock:
    _gpu_stand_ins(monkeypatch, log)
    clock = DeviceClock(torch.device("cpu"), **kwargs)
    clock.is_cuda = True
    monkeypatch.setattr(clock, "flush", lambda: log.append("flush"))
    clock.calibrate(reps=3)
    log.clear()
    return clock


def test_a_gpu_batch_queues_its_lead_and_its_inputs_before_the_first_call_and_times_neither(monkeypatch) -> None:
    """The lead (timing.LEAD_MS of flushes) and the making of every call's inputs lie between the batch's first event
    and the first call's start event: outside every call's events, inside the reported `made_ms`, and left out of the
    host clock's share with the calls' own flushes."""
    log: list = []
    clock = _gpu_clock(monkeypatch, log, lead_ms=0.5)
    least = max(0.5, shared_timing.LEAD_MAKE_FACTOR * shared_timing.LEAD_CALL_HOST_MS)  # one call, no making learnt
    assert clock.flush_ms == pytest.approx(0.09) and clock.lead_flushes == math.ceil(least / 0.09), "whole flushes"
    calls = [timing.Call(lambda i=i: log.append(f"make {i}") or [], lambda inputs, i=i: log.append(f"call {i}"))
             for i in range(3)]
    batch = timing.time_cuda_batch(clock, calls)
    per_call = ["flush", "event", "call {}", "event"]
    lead = clock.state().lead(3)  # the batch's lead covers the queueing of its three calls
    assert lead == math.ceil(max(0.5, shared_timing.LEAD_MAKE_FACTOR * 3 * shared_timing.LEAD_CALL_HOST_MS) / 0.09)
    expected = ["sync", "event", *["flush"] * lead, "make 0", "make 1", "make 2",
                *[step.format(i) for i in range(3) for step in per_call], "sync"]
    assert log == expected
    assert batch.events_ms == [1.0, 1.0, 1.0] and not batch.hidden_work and batch.times_ms == [1.0] * 3
    assert batch.made_ms == 1.0 and batch.gaps_ms == [0.09, 0.09], "one span before the calls, a flush between each two"
    assert batch.host_ms == 0.0, "the span before the calls came off a host time far smaller than it"


def test_no_call_s_inputs_exist_before_the_batch(monkeypatch) -> None:
    """Issue 39: a call's inputs are made inside the batch (after its lead), and its `run` gets what its `make` made."""
    log: list = []
    clock = _gpu_clock(monkeypatch, log, lead_ms=0.5)
    seen: list = []

    def make(i: int) -> list:
        log.append(f"make {i}")
        return [torch.full((1,), float(i))]

    calls = [timing.Call(lambda i=i: make(i), lambda inputs: seen.append(float(inputs[0]))) for i in range(3)]
    batch = timing.time_cuda_batch(clock, calls)
    assert seen == [0.0, 1.0, 2.0] and [float(x[0]) for x, in batch.inputs] == [0.0, 1.0, 2.0]
    assert log.index("make 0") > log.index("sync") + 1, "made after the batch's first event, inside its span"
    cpu = timing.time_cpu_batch(DeviceClock(torch.device("cpu")),
                                [timing.Call(lambda i=i: [torch.full((1,), float(i))], lambda inputs: inputs[0] * 2)
                                 for i in range(2)])
    assert [float(r[0]) for r in cpu.results] == [0.0, 2.0] and cpu.made_ms >= 0


def test_the_lead_can_be_turned_off_to_measure_what_it_changes(monkeypatch) -> None:
    log: list = []
    monkeypatch.setenv("JUDGE_TIMING_LEAD_MS", "0")
    clock = _gpu_clock(monkeypatch, log)
    assert clock.lead_ms == 0 and clock.lead_flushes == 0
    timing.time_cuda_batch(clock, [lambda: log.append("call")])
    assert log == ["sync", "event", "flush", "event", "call", "event", "sync"]
    monkeypatch.delenv("JUDGE_TIMING_LEAD_MS")
    assert DeviceClock(torch.device("cpu")).lead_ms == timing.LEAD_MS


def test_the_lead_covers_the_hosts_queueing_of_the_batch_s_inputs() -> None:
    """Where queueing the batch (its inputs' making and its calls, LEAD_CALL_HOST_MS each) takes the host longer than
    LEAD_MS, the lead is LEAD_MAKE_FACTOR times that for all its calls (the device then never waits for the host inside
    the spans and the calls' events it reports), capped at MAX_LEAD_MS. The parent counts the same flushes as the
    judge's own work (lead_flushes)."""
    per_call = shared_timing.LEAD_CALL_HOST_MS
    assert shared_timing.lead_flushes(100.0, 0.1, 1, 0.09) == math.ceil(shared_timing.MAX_LEAD_MS / 0.09)
    assert shared_timing.lead_flushes(0.5, 0.0, 1, 0.09) == math.ceil(
        max(0.5, shared_timing.LEAD_MAKE_FACTOR * per_call) / 0.09)
    assert shared_timing.lead_flushes(0.5, 0.5, 8, 0.09) == math.ceil(
        min(shared_timing.LEAD_MAKE_FACTOR * 8 * (0.5 + per_call), shared_timing.MAX_LEAD_MS) / 0.09)
    assert shared_timing.lead_flushes(0.5, 0.1, 3, 0.09) > shared_timing.lead_flushes(0.5, 0.1, 1, 0.09)
    assert shared_timing.lead_flushes(0.5, 100.0, 3, 0.09) == math.ceil(shared_timing.MAX_LEAD_MS / 0.09)
    assert shared_timing.lead_flushes(0.0, 1.0, 3, 0.09) == 0


def test_a_traced_child_queues_a_longer_lead_unless_told_otherwise(monkeypatch) -> None:
    """CUPTI's per-launch host cost let a Triton kernel's calls fall behind the device with the trace on: a traced
    child's clock leads by TRACED_LEAD_MS; `JUDGE_TIMING_LEAD_MS` still decides where it is set."""
    monkeypatch.delenv("JUDGE_TIMING_LEAD_MS", raising=False)
    assert DeviceClock(torch.device("cpu"), traced=True).lead_ms == timing.TRACED_LEAD_MS > timing.LEAD_MS
    monkeypatch.setenv("JUDGE_TIMING_LEAD_MS", "0.25")
    assert DeviceClock(torch.device("cpu"), traced=True).lead_ms == 0.25


def test_a_clock_makes_its_device_current_so_its_events_time_that_device(monkeypatch) -> None:
    """Events record on the current device's stream: a clock for cuda:1 in a process still on cuda:0 (the
    trusted baseline process) timed cuda:0's idle stream and cached a bandwidth 1.45x too low on a two-GPU
    host. No GPU here: set_device and the flush buffer's allocation are stand-ins."""
    made_current: list[torch.device] = []
    monkeypatch.setattr(torch.cuda, "set_device", lambda device: made_current.append(torch.device(device)))
    cpu_empty = torch.empty
    monkeypatch.setattr(torch, "empty", lambda n, dtype, device: cpu_empty(1, dtype=dtype))
    DeviceClock(torch.device("cuda:1"))
    assert made_current == [torch.device("cuda:1")]
    DeviceClock(torch.device("cpu"))
    assert made_current == [torch.device("cuda:1")], "a CPU clock leaves the current CUDA device alone"


def test_hidden_work_is_reported_when_the_host_clock_decided_the_median() -> None:
    """A flagged batch is claimed by the host clock whatever the verdict says; the verdict reports hidden work
    when most batches were (c4_side_stream on the H100: all 26), not for one host stall in seven (honest
    cross_entropy_fast, 2026-11-25)."""
    def batches(flags: str) -> list[TimedCall]:
        return [TimedCall(distribution="planted", claim_ms=0.2, window_ms=0.3, run_ms=0.25, hidden_work=flag == "h",
                          calls=8) for flag in flags]

    assert not host_decided(batches("..h...."))
    assert not host_decided(batches("hh.."))
    assert host_decided(batches("hh.h."))
    assert host_decided(batches("h" * 26))
