"""The clocks read around a real timing (sandbox/execution/phases.py `Execution.timing`), judged on the CPU with a fake
NVML module where sandbox/profiling/clocks.py imports it lazily (no GPU can exist here): not throttled; throttled,
then fine when timed again; throttled twice, so correct but not ranked. The same runs show the kernel trace on the
CPU: recorded and read back by the parent, reported unavailable (no device activity), no rule applied."""

from __future__ import annotations

import sys
import types
from dataclasses import replace

import pytest

from sandbox.config import JudgeConfig
from sandbox.pipeline import judge
from sandbox.profiling import clocks
from sandbox.verdict import Status, Verdict
from tests.sandbox.conftest import CORPUS

HONEST = (CORPUS / "cpu" / "kl_div_cpp_correct.py").read_text()


class _Violation:
    def __init__(self, ns: int) -> None:
        self.violationTime = ns


def fake_nvml(masks: list[int]) -> types.ModuleType:
    """A pynvml whose throttle reasons are `masks`, one per reading, in order (an H100's other values)."""
    nvml = types.ModuleType("pynvml")
    left = list(masks)
    nvml.NVML_CLOCK_SM, nvml.NVML_CLOCK_MEM, nvml.NVML_TEMPERATURE_GPU = 1, 2, 0
    nvml.nvmlInit = lambda: None
    nvml.nvmlDeviceGetHandleByIndex = lambda index: f"card{index}"
    nvml.nvmlDeviceGetClockInfo = lambda handle, which: 1980 if which == 1 else 2619
    nvml.nvmlDeviceGetTemperature = lambda handle, sensor: 47
    nvml.nvmlDeviceGetPowerUsage = lambda handle: 512_900
    nvml.nvmlDeviceGetEnforcedPowerLimit = lambda handle: 700_000
    nvml.nvmlDeviceGetViolationStatus = lambda handle, policy: _Violation(0)
    nvml.nvmlDeviceGetCurrentClocksEventReasons = lambda handle: left.pop(0)
    nvml.left = left
    return nvml


def _judge(config: JudgeConfig, monkeypatch: pytest.MonkeyPatch, masks: list[int]) -> Verdict:
    nvml = fake_nvml(masks)
    monkeypatch.setitem(sys.modules, "pynvml", nvml)
    monkeypatch.setattr(clocks, "_LOADED", None)
    verdict = judge("kl_div", HONEST, "cpu", config=replace(config, clocks_index=0, trace=True))
    assert nvml.left == []  # every reading the scenario scripted was taken, no more
    return verdict


def test_a_timing_that_was_not_throttled_is_ranked(judge_config, monkeypatch):
    verdict = _judge(judge_config, monkeypatch, [0x1, 0x0])  # idle before, busy and unthrottled after
    assert verdict.status is Status.CORRECT and verdict.ranked and verdict.unranked_reason is None
    seen = verdict.details["timing"]["clocks"]
    assert seen["retimed"] is False and seen["check"]["throttled"] is False
    assert seen["check"]["detail"] == "not throttled; SM 1980 -> 1980 MHz, 47 -> 47 C"
    trace = verdict.details["trace"]
    assert trace["status"] == "unavailable" and "CPU" in trace["reason"]
    assert trace["segments"] >= 2 and trace["bytes"] > 0  # the life trace, paused around each trial, read back
    assert trace["calls"] == verdict.details["timing"]["timed_calls"] + verdict.details["timing"]["warmup_calls"]


def test_a_throttled_timing_is_timed_again_and_ranked_when_the_second_is_not(judge_config, monkeypatch):
    verdict = _judge(judge_config, monkeypatch, [0x0, 0x4, 0x0, 0x0])  # power capping at the end of the first
    assert verdict.status is Status.CORRECT and verdict.ranked
    seen = verdict.details["timing"]["clocks"]
    assert seen["retimed"] is True and seen["first"]["reasons"] == ["sw_power_cap"]
    assert seen["check"]["throttled"] is False


def test_a_timing_throttled_twice_stays_correct_but_is_not_ranked(judge_config, monkeypatch):
    verdict = _judge(judge_config, monkeypatch, [0x0, 0x40, 0x0, 0x20])  # thermal slowdowns, both timings
    assert verdict.status is Status.CORRECT and verdict.performance is not None
    assert verdict.ranked is False
    assert verdict.unranked_reason.startswith("the card was throttled during both timings: throttled during timing "
                                              "(sw_thermal_slowdown)")
    assert "not ranked: the card was throttled" in verdict.diagnosis
    assert verdict.details["timing"]["clocks"]["first"]["reasons"] == ["hw_thermal_slowdown"]


def test_without_nvml_the_check_is_unknown_and_nothing_changes(judge_config, monkeypatch):
    monkeypatch.setitem(sys.modules, "pynvml", None)  # an import of it raises ImportError
    monkeypatch.setattr(clocks, "_LOADED", None)
    verdict = judge("kl_div", HONEST, "cpu", config=replace(judge_config, trace=False))
    assert verdict.status is Status.CORRECT and verdict.ranked
    assert verdict.details["timing"]["clocks"] == {"check": {"throttled": None, "reasons": [], "detail": (
        "no clock readings (no NVML or no GPU on this host)")}, "retimed": False}
    assert verdict.details["trace"] == {"status": "off"}
