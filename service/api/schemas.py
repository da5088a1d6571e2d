"""Request and response bodies of the HTTP API (what OpenAPI documents)."""

from __future__ import annotations

import datetime as dt
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from sandbox.verdict import Verdict
from service.queue.states import JobState, PublicStatus


class SubmissionCreate(BaseModel):
    """A candidate for one task. `source` is either a bare Python module defining `ModelNew` or a raw LLM
    completion (the last ```python block is the candidate)."""

    model_config = ConfigDict(extra="forbid", json_schema_extra={"examples": [{
        "task": "kl_div", "source": "import torch\n...\nclass ModelNew(torch.nn.Module): ...",
        "model": "my-llm-7b", "sampling": {"temperature": 0.8, "top_p": 0.95}, "sample_index": 3,
        "tags": ["run-42"], "idempotency_key": "run-42/kl_div/3"}]})

    task: str = Field(description="Task id, e.g. `kl_div` (see GET /v1/tasks).")
    source: str = Field(description="The candidate module or raw completion, UTF-8 text.")
    model: str | None = Field(default=None, max_length=200, description="Name of the model that wrote it.")
    sampling: dict[str, Any] = Field(default_factory=dict, description="Sampling parameters, free-form.")
    sample_index: int | None = Field(default=None, ge=0, description="Index of this sample among several.")
    tags: list[str] = Field(default_factory=list, max_length=32, description="Free-form labels.")
    idempotency_key: str | None = Field(
        default=None, max_length=200,
        description="Client key: resubmitting with the same key returns the first submission instead of a new one. "
                    "May also be sent as the `Idempotency-Key` header.")


class SubmissionAccepted(BaseModel):
    id: str
    status: PublicStatus
    location: str = Field(description="Where to read the submission (also in the Location header).")
    events: str = Field(description="Server-sent events of its status changes.")
    duplicate: bool = Field(description="True when an earlier submission with the same idempotency key is returned.")


class Timestamps(BaseModel):
    queued_at: dt.datetime
    compile_started_at: dt.datetime | None = None
    compiled_at: dt.datetime | None = None
    run_started_at: dt.datetime | None = None
    finished_at: dt.datetime | None = None


class SubmissionOut(BaseModel):
    id: str
    task: str
    submitter: str
    model: str | None
    sample_index: int | None
    sampling: dict[str, Any]
    tags: list[str]
    source_sha256: str
    status: PublicStatus = Field(description="queued, compiling, running or done.")
    stage: JobState = Field(description="The exact job state; `compiled` means built and waiting for a device.")
    position: int | None = Field(description="While queued: how many ready jobs are ahead of this one (0 = next).")
    created_at: dt.datetime
    timestamps: Timestamps
    attempts: int = Field(description="Times a worker claimed this job.")
    compile_cached: bool | None = Field(description="True when an identical build was reused.")
    verdict: Verdict | None = Field(description="The judge's verdict, once done.")


class Shapes(BaseModel):
    official: list[int]
    cpu: list[int]
    extra: list[list[int]]
    cpu_extra: list[list[int]]


class ToleranceOut(BaseModel):
    atol: float
    rtol: float
    why: str


class DeviceBaseline(BaseModel):
    """What was last measured on one device model (from the newest verdict that timed there)."""

    device_name: str
    shape: list[int] | None
    baselines_ms: dict[str, float] = Field(description="Median ms of the reference, by baseline (eager, compile).")
    bandwidth_bytes_per_s: float | None
    min_bytes: int
    speed_of_light_ms: float | None = Field(description="min_bytes / bandwidth: the memory-bound floor.")
    measured_at: dt.datetime


class TaskSummary(BaseModel):
    id: str
    title: str
    kernelbench_id: str
    official_shape: list[int]


class TaskDetail(TaskSummary):
    problem_source: str
    shapes: Shapes
    distributions: list[str]
    tolerance: ToleranceOut
    forbidden_operators: list[str]
    requires_custom_kernel: bool
    min_bytes: int = Field(description="Bytes a perfect kernel must move at the official shape.")
    baselines: list[DeviceBaseline]


class LeaderboardEntry(BaseModel):
    rank: int
    name: str = Field(description="The submitter or the model, per `by`.")
    submitter: str
    model: str | None
    submission_id: str
    median_ms: float | None
    speedup_eager: float | None
    speedup_compile: float | None
    speed_of_light: float | None
    submitted_at: dt.datetime


class DeviceBoard(BaseModel):
    device_name: str
    entries: list[LeaderboardEntry]


class Leaderboard(BaseModel):
    task: str
    by: str
    sort: str
    devices: list[DeviceBoard]


class KeyCreate(BaseModel):
    submitter: str = Field(min_length=1, max_length=100, description="Name shown on leaderboards.")


class KeyOut(BaseModel):
    id: str
    submitter: str
    prefix: str
    created_at: dt.datetime
    revoked_at: dt.datetime | None


class KeyCreated(KeyOut):
    key: str = Field(description="The secret: shown once, never stored.")


class Health(BaseModel):
    status: str
    detail: dict[str, Any] = Field(default_factory=dict)
