"""The GPU's clocks, temperature, power and throttling, read through NVML before and after a timing, and the rule
that says whether the card was throttled while it was timed.

Read in the trusted parent (the judge), never in the candidate's child: NVML reads the driver's counters for
the whole card, so nothing the candidate patches changes them (it could only make the card hot, which is the
point of reading them). `nvidia-ml-py` (the `pynvml` module, NVIDIA's own binding) is imported lazily: a host
without it, or without a GPU, reads `None` and the rule answers "unknown", never "throttled".

What counts as throttling during a timing (`THROTTLING`): the clock-event reasons that slow a busy card down,
power capping (software) and thermal or hardware slowdowns (incl. the power brake). Not counted: `GPU idle` (the
card is idle between readings, not while timed), `applications clocks setting` and `display clock setting`
(an operator's configured clocks: the same for every candidate on the card, so not a disturbance of this one),
`sync boost` (clocks matched across a group of cards). NVML's violation counters (time spent throttled for power
and thermal reasons, cumulative in ns) are compared across the window where the card has them: a reason that
came and went between the two readings is then still seen, which the instantaneous reasons would miss.

Use (the two call sites, in sandbox/execution/phases.py `Execution.timing`): `before = read(device)` just before the
timed batches and `after = read(device)` just after them; `check(before, after)` gives a `ThrottleCheck` to
store with the timing (`details["clocks"]`) and, when `throttled`, to re-time once or leave the verdict unranked.
"""

from __future__ import annotations

import importlib
import time
from dataclasses import asdict, dataclass, field
from typing import Any

# NVML's clock-event (throttle) reason bits (nvml.h, nvmlClocksEventReason*; the same as the older
# nvmlClocksThrottleReason*).
REASONS = {
    0x1: "gpu_idle",
    0x2: "applications_clocks_setting",
    0x4: "sw_power_cap",
    0x8: "hw_slowdown",
    0x10: "sync_boost",
    0x20: "sw_thermal_slowdown",
    0x40: "hw_thermal_slowdown",
    0x80: "hw_power_brake_slowdown",
    0x100: "display_clock_setting",
}
THROTTLING = frozenset({"sw_power_cap", "hw_slowdown", "sw_thermal_slowdown", "hw_thermal_slowdown",
                        "hw_power_brake_slowdown"})
"""Reasons that slow a busy card below what it would run at: a timing under one of them is not comparable."""
VIOLATIONS = {"power": 0, "thermal": 1}
"""NVML_PERF_POLICY_POWER and NVML_PERF_POLICY_THERMAL: the violation counters compared across the window."""
VIOLATION_TOLERANCE_NS = 1_000_000
"""Throttled time under 1 ms across a timing of seconds is below what moves a median: not counted."""


@dataclass(frozen=True)
class ClockReading:
    """One NVML reading of one card; any field the driver did not give is None."""

    at_s: float
    """time.monotonic() of the reading."""
    sm_mhz: int | None = None
    memory_mhz: int | None = None
    temperature_c: int | None = None
    power_w: float | None = None
    power_limit_w: float | None = None
    reasons_mask: int | None = None
    violations_ns: dict[str, int] = field(default_factory=dict)
    """Cumulative time throttled per policy ("power", "thermal"), where the card reports it."""

    @property
    def reasons(self) -> list[str]:
        return reason_names(self.reasons_mask)


@dataclass(frozen=True)
class ThrottleCheck:
    """Whether the card was throttled while a timing ran between two readings."""

    throttled: bool | None
    """True: throttled; False: not; None: unknown (no NVML, no GPU, a reading missing)."""
    reasons: list[str]
    detail: str

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def reason_names(mask: int | None) -> list[str]:
    if mask is None:
        return []
    names = [name for bit, name in REASONS.items() if mask & bit]
    unknown = mask & ~sum(REASONS)
    return names + ([f"unknown_0x{unknown:x}"] if unknown else [])


def check(before: ClockReading | None, after: ClockReading | None) -> ThrottleCheck:
    """The rule: throttled when a power or thermal violation counter grew by more than VIOLATION_TOLERANCE_NS
    across the window, or when either reading shows a THROTTLING reason. Pure: tested on recorded readings."""
    if before is None or after is None:
        return ThrottleCheck(None, [], "no clock readings (no NVML or no GPU on this host)")
    grown = {name: after.violations_ns[name] - before.violations_ns[name] for name in VIOLATIONS
             if name in before.violations_ns and name in after.violations_ns}
    counted = sorted(f"{name}_violation" for name, ns in grown.items() if ns > VIOLATION_TOLERANCE_NS)
    seen = sorted({r for r in before.reasons + after.reasons if r in THROTTLING})
    reasons = counted + [r for r in seen if r not in counted]
    clocks = f"SM {before.sm_mhz} -> {after.sm_mhz} MHz, {before.temperature_c} -> {after.temperature_c} C"
    if reasons:
        spent = ", ".join(f"{name} {ns / 1e6:.1f} ms" for name, ns in grown.items() if ns > VIOLATION_TOLERANCE_NS)
        spent = f"; {spent}" if spent else ""
        return ThrottleCheck(True, reasons, f"throttled during timing ({', '.join(reasons)}{spent}); {clocks}")
    if before.reasons_mask is None and after.reasons_mask is None and not grown:
        return ThrottleCheck(None, [], f"the card reported no throttle reasons; {clocks}")
    return ThrottleCheck(False, [], f"not throttled; {clocks}")


# --- reading (NVML) -----------------------------------------------------------------------------------

def _nvml() -> Any | None:
    """The pynvml module, initialised once; None where nvidia-ml-py is not installed or no driver answers."""
    global _LOADED
    if _LOADED is not None:
        return _LOADED or None
    try:
        nvml = importlib.import_module("pynvml")
        nvml.nvmlInit()
    except Exception:  # noqa: BLE001 - ImportError, or NVMLError of any kind (no driver, no library): no readings
        _LOADED = False
        return None
    _LOADED = nvml
    return nvml


_LOADED: Any = None


def _call(default: Any, fn: Any, *args: Any) -> Any:
    try:
        return fn(*args)
    except Exception:  # noqa: BLE001 - a field this card or driver does not support reads as unavailable
        return default


def read(device: str | int) -> ClockReading | None:
    """NVML's view of this CUDA device now ("cuda:1", 1); None without NVML or for a CPU device. The index is
    NVML's: the same as CUDA's where CUDA_VISIBLE_DEVICES is unset or names cards in NVML order."""
    if isinstance(device, str):
        kind, _, index = device.partition(":")
        if kind != "cuda":
            return None
        device = int(index or 0)
    nvml = _nvml()
    if nvml is None:
        return None
    handle = _call(None, nvml.nvmlDeviceGetHandleByIndex, device)
    if handle is None:
        return None
    reasons = getattr(nvml, "nvmlDeviceGetCurrentClocksEventReasons", None) or getattr(
        nvml, "nvmlDeviceGetCurrentClocksThrottleReasons", None)
    power = _call(None, nvml.nvmlDeviceGetPowerUsage, handle)
    limit = _call(None, nvml.nvmlDeviceGetEnforcedPowerLimit, handle)
    violations = {}
    for name, policy in VIOLATIONS.items():
        status = _call(None, nvml.nvmlDeviceGetViolationStatus, handle, policy)
        if status is not None:
            violations[name] = int(status.violationTime)
    return ClockReading(
        at_s=time.monotonic(),
        sm_mhz=_call(None, nvml.nvmlDeviceGetClockInfo, handle, nvml.NVML_CLOCK_SM),
        memory_mhz=_call(None, nvml.nvmlDeviceGetClockInfo, handle, nvml.NVML_CLOCK_MEM),
        temperature_c=_call(None, nvml.nvmlDeviceGetTemperature, handle, nvml.NVML_TEMPERATURE_GPU),
        power_w=None if power is None else power / 1000.0,
        power_limit_w=None if limit is None else limit / 1000.0,
        reasons_mask=_call(None, reasons, handle),
        violations_ns=violations,
    )
