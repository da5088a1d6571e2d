"""Nsight Compute's raw CSV page (`ncu --csv --page raw`) read into typed per-kernel rows.

The layout ncu writes (one report for the whole run, after the target exits):

    ==PROF== Connected to process 4242 (/usr/bin/python3.12)        <- ncu's own messages, "==X==" prefixed
    "ID","Process ID","Process Name","Host Name","Kernel Name","Context","Stream","Block Size","Grid Size",
        "Device","CC","dram__bytes.sum",...                          <- header: fixed columns, then metric names
    "","","","","","","","","","","","byte",...                      <- units row: empty under fixed columns
    "0","4242","python3.12","sandbox","kl_div_kernel(const float *, ...)","1","7","(256, 1, 1)",...
                                                                     <- one row per profiled kernel launch

Numbers may carry thousands separators ("1,073,741,824"); a metric ncu could not collect is "n/a" (or empty,
or "nan"). Such a value is kept as unavailable (None) and named in the row's `unavailable`, never read as 0.

What the CSV says is written by a process that ran candidate code (ncu wraps the candidate's child, both inside
the sandbox): the candidate can only misreport its own profile, which decides nothing (the verdict and the
ranked time are measured elsewhere). The parser still treats it as hostile input: bounded size, no eval, and a
malformed file gives a `ProfileParseError`, not a crash.
"""

from __future__ import annotations

import csv
import io
import math
import re
import statistics
from typing import Literal

from pydantic import BaseModel, Field

MAX_CSV_BYTES = 4 << 20
"""A few kilobytes per kernel launch; 4 MiB is far more than the launch-count limit lets ncu write."""
FIXED_COLUMNS = ("ID", "Process ID", "Process Name", "Host Name", "Kernel Name", "Context", "Stream",
                 "Block Size", "Grid Size", "Device", "CC")
"""The raw page's leading columns before the metrics (ncu 2023-2025); read by name, so their order may vary."""

DURATION = "gpu__time_duration.sum"
DRAM_BYTES = "dram__bytes.sum"
DRAM_PER_SECOND = "dram__bytes.sum.per_second"
DRAM_PCT = "dram__throughput.avg.pct_of_peak_sustained_elapsed"
SM_PCT = "sm__throughput.avg.pct_of_peak_sustained_elapsed"
OCCUPANCY = "sm__warps_active.avg.pct_of_peak_sustained_active"
REGISTERS = "launch__registers_per_thread"
SHARED_STATIC = "launch__shared_mem_per_block_static"
SHARED_DYNAMIC = "launch__shared_mem_per_block_dynamic"
GRID = "launch__grid_size"
BLOCK = "launch__block_size"
STALL_PCSAMP = "smsp__pcsamp_warps_issue_stalled_"
STALL_LATENCY = "smsp__average_warp_latency_issue_stalled_"
NAMED_METRICS = (DURATION, DRAM_BYTES, DRAM_PER_SECOND, DRAM_PCT, SM_PCT, OCCUPANCY, REGISTERS, SHARED_STATIC,
                 SHARED_DYNAMIC, GRID, BLOCK)
"""The metrics a `KernelProfile` reads by name; the stall reasons are found by prefix (STALL_*)."""

_UNAVAILABLE = frozenset({"", "n/a", "na", "nan", "-nan", "inf", "-inf", "(!) n/a"})
_SCALE = {
    "nsecond": 1.0, "usecond": 1e3, "msecond": 1e6, "second": 1e9,  # durations -> ns
    "byte": 1.0, "kbyte": 1e3, "mbyte": 1e6, "gbyte": 1e9, "tbyte": 1e12,  # ncu's byte prefixes are SI
    "byte/second": 1.0, "kbyte/second": 1e3, "mbyte/second": 1e6, "gbyte/second": 1e9, "tbyte/second": 1e12,
}
_STALL = re.compile(rf"^(?:{STALL_PCSAMP}|{STALL_LATENCY})([a-z_]+?)(?:\.ratio)?$")
_NOT_STALLS = frozenset({"selected"})
"""Sampled warp states that are not stalls: "selected" is the warp issuing."""
_DIM3 = re.compile(r"^\(\s*(\d+),\s*(\d+),\s*(\d+)\s*\)$")
_COUNTERS_REFUSED = re.compile(r"ERR_NVGPUCTRPERM|permission to access NVIDIA GPU Performance Counters", re.I)


class ProfileParseError(ValueError):
    """The text is not ncu's raw CSV page (no header, a units row missing, rows of the wrong width)."""


class Stall(BaseModel):
    reason: str
    """ncu's name without its prefix: `long_scoreboard`, `barrier`, `math_pipe_throttle`, ..."""
    share_pct: float
    """Of all sampled warp states (pc sampling) or of the summed stall latencies (latency metrics)."""


class KernelProfile(BaseModel):
    """One kernel (launches with the same name, grid and block merged: the medians of their values)."""

    name: str
    launches: int = 1
    duration_ns: float | None = None
    dram_bytes: float | None = None
    dram_bytes_per_s: float | None = None
    dram_pct_of_peak: float | None = None
    sm_pct_of_peak: float | None = None
    achieved_occupancy_pct: float | None = None
    registers_per_thread: int | None = None
    shared_bytes_per_block: int | None = None
    """Static plus dynamic shared memory per block."""
    grid: tuple[int, int, int] | None = None
    block: tuple[int, int, int] | None = None
    stalls: list[Stall] = Field(default_factory=list)
    """The top warp stall reasons, largest first (at most `TOP_STALLS`)."""
    unavailable: list[str] = Field(default_factory=list)
    """Fields ncu returned no number for (n/a, NaN, absent): shown as such, never as zero."""


TOP_STALLS = 3


class NcuReport(BaseModel):
    """What one ncu run's log said: the kernels, and ncu's own errors and warnings."""

    kernels: list[KernelProfile]
    launches: int
    """Kernel launches profiled (rows of the CSV)."""
    errors: list[str] = Field(default_factory=list)
    warnings: list[str] = Field(default_factory=list)
    counters_refused: bool = False
    """ncu said the GPU's performance counters are reserved for administrators on this host."""


def number(text: str, unit: str = "") -> float | None:
    """One CSV cell as a float in base units; None for ncu's "n/a", NaN, infinities or an empty cell."""
    cell = text.strip().replace(",", "")
    if cell.lower() in _UNAVAILABLE:
        return None
    try:
        value = float(cell)
    except ValueError:
        return None
    if not math.isfinite(value):
        return None
    return value * _SCALE.get(unit.strip().lower(), 1.0)


def dim3(text: str) -> tuple[int, int, int] | None:
    match = _DIM3.match(text.strip())
    return (int(match[1]), int(match[2]), int(match[3])) if match else None


def _messages(text: str) -> tuple[list[str], list[str], list[str]]:
    """Split ncu's log into its "==ERROR=="/"==WARNING==" messages and the CSV lines."""
    errors, warnings, lines = [], [], []
    for line in text.splitlines():
        if line.startswith("==ERROR=="):
            errors.append(line[len("==ERROR=="):].strip())
        elif line.startswith("==WARNING=="):
            warnings.append(line[len("==WARNING=="):].strip())
        elif not line.startswith("==") and line.strip():
            lines.append(line)
    return errors, warnings, lines


def _rows(lines: list[str]) -> tuple[list[str], list[str], list[list[str]]]:
    """Header, units and data rows. Kernel names hold commas and parentheses, so the csv module reads them."""
    start = next((i for i, line in enumerate(lines) if line.startswith('"ID",')), None)
    if start is None:
        return [], [], []
    table = list(csv.reader(io.StringIO("\n".join(lines[start:]))))
    header = table[0]
    if "Kernel Name" not in header:
        raise ProfileParseError("the CSV header has no \"Kernel Name\" column: not ncu's raw page")
    if len(table) < 2 or any(table[1][i] for i, name in enumerate(header) if name in FIXED_COLUMNS
                             and i < len(table[1])):
        raise ProfileParseError("the row after the header is not a units row: was --page raw given?")
    units, rows = table[1], table[2:]
    for number_, row in enumerate(rows, start=1):
        if len(row) != len(header):
            raise ProfileParseError(f"row {number_} has {len(row)} cells, the header {len(header)}")
    return header, units, rows


def _launch(cells: dict[str, tuple[str, str]]) -> KernelProfile:
    """One CSV row (metric -> (value, unit)) as a KernelProfile of one launch."""

    def value(metric: str) -> float | None:
        cell, unit = cells.get(metric, ("", ""))
        return number(cell, unit)

    unavailable = [m for m in NAMED_METRICS if value(m) is None]
    shared = [value(SHARED_STATIC), value(SHARED_DYNAMIC)]
    grid = dim3(cells.get("Grid Size", ("", ""))[0])
    block = dim3(cells.get("Block Size", ("", ""))[0])
    if grid is None and value(GRID) is not None:
        grid = (int(value(GRID)), 1, 1)
    if block is None and value(BLOCK) is not None:
        block = (int(value(BLOCK)), 1, 1)
    registers = value(REGISTERS)
    return KernelProfile(
        name=cells["Kernel Name"][0], duration_ns=value(DURATION), dram_bytes=value(DRAM_BYTES),
        dram_bytes_per_s=value(DRAM_PER_SECOND), dram_pct_of_peak=value(DRAM_PCT), sm_pct_of_peak=value(SM_PCT),
        achieved_occupancy_pct=value(OCCUPANCY), registers_per_thread=None if registers is None else int(registers),
        shared_bytes_per_block=None if None in shared else int(sum(shared)), grid=grid, block=block,
        stalls=_stalls({m: value(m) for m in cells if _STALL.match(m) and not m.endswith("_not_issued")}),
        unavailable=[*unavailable, *(["stalls"] if not any(_STALL.match(m) and value(m) is not None
                                                           for m in cells) else [])],
    )


def _stalls(values: dict[str, float | None]) -> list[Stall]:
    """The top reasons by share. Sampled counts (pcsamp) win over latency ratios when both were collected."""
    sampled = {m: v for m, v in values.items() if m.startswith(STALL_PCSAMP) and v is not None}
    chosen = sampled or {m: v for m, v in values.items() if v is not None}
    by_reason = {_STALL.match(m)[1]: v for m, v in chosen.items()}
    total = sum(by_reason.values())
    if total <= 0:
        return []
    stalls = [Stall(reason=r, share_pct=100.0 * v / total) for r, v in by_reason.items() if r not in _NOT_STALLS]
    return sorted(stalls, key=lambda s: (-s.share_pct, s.reason))[:TOP_STALLS]


def _merge(launches: list[KernelProfile]) -> KernelProfile:
    """Launches of one kernel (same name, grid, block): the median of each value; unavailable if any was."""
    first = launches[0]
    if len(launches) == 1:
        return first
    merged = first.model_dump()
    for field in ("duration_ns", "dram_bytes", "dram_bytes_per_s", "dram_pct_of_peak", "sm_pct_of_peak",
                  "achieved_occupancy_pct"):
        values = [getattr(k, field) for k in launches]
        merged[field] = None if None in values else statistics.median(values)
    merged["launches"] = sum(k.launches for k in launches)
    merged["unavailable"] = sorted({u for k in launches for u in k.unavailable})
    longest = max(launches, key=lambda k: k.duration_ns or 0.0)
    merged["stalls"] = [s.model_dump() for s in longest.stalls]
    return KernelProfile(**merged)


def parse_raw_csv(text: str) -> NcuReport:
    """ncu's log (`--csv --page raw`, with its ==PROF== lines) -> one KernelProfile per distinct kernel, in
    the order of first launch. Raises ProfileParseError for text that is not that page."""
    if len(text.encode("utf-8", "replace")) > MAX_CSV_BYTES:
        raise ProfileParseError(f"the profile is over {MAX_CSV_BYTES} bytes")
    errors, warnings, lines = _messages(text)
    refused = any(_COUNTERS_REFUSED.search(m) for m in errors + warnings + lines)
    header, units, rows = _rows(lines)
    groups: dict[tuple, list[KernelProfile]] = {}
    for row in rows:
        cells = {name: (cell, units[i] if i < len(units) else "") for i, (name, cell) in enumerate(zip(header, row))}
        launch = _launch(cells)
        groups.setdefault((launch.name, launch.grid, launch.block), []).append(launch)
    return NcuReport(kernels=[_merge(g) for g in groups.values()], launches=len(rows), errors=errors,
                     warnings=warnings, counters_refused=refused)


ProfileStatus = Literal["ok", "unavailable", "failed"]
"""ok: kernels were profiled. unavailable: this host cannot profile (no GPU, no ncu, counters reserved for
administrators): nobody's fault. failed: the profiled run did not finish (the candidate crashed under ncu, the
time limit): `reason` says how."""


class Profile(BaseModel):
    """A candidate's profile as stored beside its verdict: advisory, never part of the ranked time."""

    status: ProfileStatus
    reason: str | None = None
    """Why the profile is unavailable or failed; None when ok."""
    device: str | None = None
    device_name: str | None = None
    ncu_version: str | None = None
    calls: int = 0
    """Forward calls run under the profiler, after one warm-up call that is not profiled."""
    launches: int = 0
    """Kernel launches profiled (at most the launch limit)."""
    launch_limit: int = 0
    kernels: list[KernelProfile] = Field(default_factory=list)
    warnings: list[str] = Field(default_factory=list)
    gpu_seconds: float = 0.0
    """Wall time the profiled child held the device: accounted apart from the judging's."""

    @property
    def truncated(self) -> bool:
        """The launch limit stopped ncu before every launch of the profiled calls was seen."""
        return self.launch_limit > 0 and self.launches >= self.launch_limit
