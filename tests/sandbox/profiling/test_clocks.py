"""The "throttled during timing" rule on recorded NVML readings (H100-like values), and reading on a GPU-less host."""

from __future__ import annotations

from sandbox.profiling.clocks import ClockReading, check, read, reason_names

IDLE = ClockReading(at_s=100.0, sm_mhz=345, memory_mhz=2619, temperature_c=31, power_w=71.2, power_limit_w=700.0,
                    reasons_mask=0x1, violations_ns={"power": 5_120_000_000, "thermal": 0})
"""Before a timing: the card idle at its lowest clock (the idle reason set, nothing counted)."""
BUSY = ClockReading(at_s=103.1, sm_mhz=1980, memory_mhz=2619, temperature_c=47, power_w=512.9, power_limit_w=700.0,
                    reasons_mask=0x0, violations_ns={"power": 5_120_000_000, "thermal": 0})


def _after(**changes: object) -> ClockReading:
    return ClockReading(**{**BUSY.__dict__, **changes})


def test_an_idle_card_then_a_busy_one_is_not_throttled():
    result = check(IDLE, BUSY)
    assert result.throttled is False and result.reasons == []
    assert result.detail == "not throttled; SM 345 -> 1980 MHz, 31 -> 47 C"


def test_power_capping_at_the_second_reading_is_throttling():
    result = check(IDLE, _after(reasons_mask=0x4, power_w=699.7, sm_mhz=1755))
    assert result.throttled is True and result.reasons == ["sw_power_cap"]
    assert "SM 345 -> 1755 MHz" in result.detail


def test_a_thermal_slowdown_that_came_and_went_is_seen_in_the_violation_counter():
    result = check(IDLE, _after(violations_ns={"power": 5_120_000_000, "thermal": 250_000_000}))
    assert result.throttled is True and result.reasons == ["thermal_violation"]
    assert "thermal 250.0 ms" in result.detail


def test_a_violation_under_a_millisecond_and_operator_settings_are_not_throttling():
    tiny = _after(violations_ns={"power": 5_120_400_000, "thermal": 0})
    assert check(IDLE, tiny).throttled is False
    configured = _after(reasons_mask=0x2 | 0x10 | 0x100)  # applications clocks, sync boost, display clock
    assert check(IDLE, configured).throttled is False
    assert reason_names(0x2 | 0x10 | 0x100) == ["applications_clocks_setting", "sync_boost", "display_clock_setting"]


def test_hardware_slowdowns_count_from_either_reading():
    for mask, name in ((0x8, "hw_slowdown"), (0x40, "hw_thermal_slowdown"), (0x80, "hw_power_brake_slowdown"),
                       (0x20, "sw_thermal_slowdown")):
        assert check(_after(reasons_mask=mask), BUSY).reasons == [name]


def test_missing_readings_are_unknown_never_throttled():
    assert check(None, BUSY).throttled is None and check(IDLE, None).throttled is None
    bare = ClockReading(at_s=1.0)
    assert check(bare, bare).throttled is None
    assert reason_names(0x1 | 0x400) == ["gpu_idle", "unknown_0x400"]


def test_this_host_reads_nothing_without_a_gpu():
    assert read("cpu") is None
    assert read("cuda:0") is None  # no NVML here (nvidia-ml-py absent, or no driver): a reading is None
