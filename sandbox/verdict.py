"""The typed result of judging one candidate: `Verdict` and the models it is built from.

A `Verdict` is what leaves the sandbox: it is JSON-serialisable (`verdict.model_dump_json()`), stored
as is by the service, and read back with `Verdict.model_validate_json`.
"""

from __future__ import annotations

import enum
import json
from typing import Any

from pydantic import BaseModel, ConfigDict, Field


class Status(str, enum.Enum):
    """The outcome of judging one candidate, defined once. Final unless SYSTEM_ERROR."""

    COMPILE_ERROR = "compile_error"
    RUNTIME_ERROR = "runtime_error"
    TIMEOUT = "timeout"
    INCORRECT = "incorrect"
    POLICY_VIOLATION = "policy_violation"
    TAMPER_DETECTED = "tamper_detected"
    CORRECT = "correct"
    SYSTEM_ERROR = "system_error"
    """The judge itself failed (infrastructure): retry; never blame the candidate."""


_JSON_SAFE = ConfigDict(ser_json_inf_nan="strings")
"""An output of inf or NaN is a verdict's evidence (max_abs_error: inf). JSON has no such numbers and
PostgreSQL's JSON type refuses `Infinity`, so they travel as the strings "Infinity", "-Infinity" and "NaN",
which pydantic reads back as floats. Store verdicts with `json_ready`."""


class TrialResult(BaseModel):
    """One correctness trial: fresh inputs from one seed and distribution, compared with fp64 truth."""

    model_config = _JSON_SAFE

    trial: int
    distribution: str
    shape: list[int]
    seed: int
    passed: bool
    max_abs_error: float | None = None
    max_rel_error: float | None = None
    worst_index: list[int] | None = None
    expected: float | None = None
    """Ground-truth value at the worst index (the whole output for a scalar loss)."""
    got: float | None = None
    message: str | None = None


class TimingStats(BaseModel):
    """Repeated timings of one callable, in milliseconds."""

    model_config = _JSON_SAFE

    median_ms: float
    q25_ms: float
    q75_ms: float
    min_ms: float
    mean_ms: float
    reps: int
    ci95_ms: tuple[float, float] | None = None
    """Bootstrap 95% interval of the median."""

    @property
    def iqr_ms(self) -> float:
        return self.q75_ms - self.q25_ms


class Performance(BaseModel):
    model_config = _JSON_SAFE
    candidate: TimingStats
    baselines: dict[str, TimingStats] = Field(default_factory=dict)
    """Reference timings by name ("eager", "compile"), measured in a trusted process on the same device."""
    speedups: dict[str, float] = Field(default_factory=dict)
    """baseline median / candidate median, by baseline name."""
    min_bytes: int
    bandwidth_bytes_per_s: float | None = None
    """The device's measured copy bandwidth used for speed-of-light."""
    speed_of_light_fraction: float | None = None
    """(min_bytes / bandwidth) / candidate median: 1.0 means the kernel runs at the memory floor."""
    peak_memory_bytes: int | None = None
    reference_peak_memory_bytes: int | None = None


class Environment(BaseModel):
    model_config = _JSON_SAFE
    device: str
    device_name: str | None = None
    driver: str | None = None
    torch: str
    cuda: str | None = None
    compute_capability: str | None = None
    clocks: dict[str, Any] = Field(default_factory=dict)
    python: str
    isolation: str
    """Which isolation mechanism ran the child (e.g. "bwrap", "unshare", "none")."""
    hostname: str | None = None


class CompileError(BaseModel):
    """One error of a failed build, placed in the candidate's own file where it can be (sandbox/build/errors.py)."""

    file_line: int | None = None
    """The line of candidate.py (the judged module) the error is at; None when it is not in one of its literals."""
    sent_line: int | None = None
    """The same line in the text as sent: later than file_line when the module came in a completion's code block."""
    location: str
    """Where the compiler put it, file name only: `main.cpp:44:5`, `cuda.cu(12)`, `TensorBody.h:40:3`."""
    message: str
    kind: str
    """`undeclared` (a name, member or overload not found), `syntax`, `type` or `other`."""
    code: str | None = None
    """The text of that line in the file the compiler read, when the judge could read it."""
    note: str | None = None
    """Where the line is when it is not the candidate's own text (load_inline's bindings, a generated file)."""


class Verdict(BaseModel):
    # `judged_sha256` travels as `source_sha256` (its stored and API name) and is accepted under either name.
    model_config = ConfigDict(**_JSON_SAFE, validate_by_name=True, validate_by_alias=True, serialize_by_alias=True)
    status: Status
    diagnosis: str
    """What went wrong, written for a person or an LLM to act on; a one-line summary when correct."""
    task: str
    device: str
    judged_sha256: str = Field(alias="source_sha256")
    """sha256 of what was judged: the code (the module extracted from the text, `code_sha256` elsewhere), or the
    raw text itself (`text_sha256`) when no code could be extracted from it. On the wire, in stored verdicts and in
    the API it is `source_sha256`, the name it had first."""
    toolchain: str | None = None
    """Compiler/torch fingerprint used for the build cache key."""
    stages: dict[str, float] = Field(default_factory=dict)
    """Seconds spent in each stage: extract, static_checks, compile, correctness, timing, ..."""
    trials: list[TrialResult] = Field(default_factory=list)
    extra_shapes: list[TrialResult] = Field(default_factory=list)
    """Results at the task's extra shapes: reported, never part of the status."""
    performance: Performance | None = None
    environment: Environment | None = None
    imports: list[str] = Field(default_factory=list)
    compile_log: str | None = None
    """Compiler output (truncated to a bounded size), errors first."""
    compile_errors: list[CompileError] = Field(default_factory=list)
    """A compile_error's first errors, each with its line in the candidate's source where it was found."""
    details: dict[str, Any] = Field(default_factory=dict)
    """Stage-specific extras: exception type and traceback tail, broken rule and call, etc."""
    ranked: bool = True
    """Whether a correct verdict's time may be ranked. False when the card was throttled during both of its timings
    (sandbox/profiling/clocks.py): the verdict stands, its time is not comparable. The leaderboard also leaves out
    verdicts judged under weaker isolation (service/ranking.py), which this flag does not record."""
    unranked_reason: str | None = None
    """Why `ranked` is False."""


def json_ready(model: BaseModel) -> Any:
    """A verdict (or part of one) as plain JSON values that any database's JSON type accepts: inf and NaN as
    strings (see _JSON_SAFE). `model_dump(mode="json")` keeps them as floats."""
    return json.loads(model.model_dump_json())
