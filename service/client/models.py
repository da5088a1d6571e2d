"""What the client returns: typed views of the API's JSON answers.

These mirror `service/api/schemas.py` and the batch routes but are declared here, on purpose: the client
must import without torch (the server's `Verdict` lives in `sandbox`, which loads it), so a user can
`pip install` the service and call it from a training loop without paying for the judge. Unknown fields
are kept (`extra="allow"`), so an older client still reads a newer server.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

from pydantic import BaseModel, ConfigDict, Field


class _View(BaseModel):
    model_config = ConfigDict(extra="allow", protected_namespaces=())


VERDICT_STATUSES = ("correct", "incorrect", "compile_error", "runtime_error", "timeout", "policy_violation",
                    "tamper_detected", "system_error")
"""Every verdict status, in the order tables show them (the sandbox's `Status`, repeated without torch)."""

JOB_STAGES = ("queued", "compiling", "compiled", "running", "done")
"""Job states in pipeline order (`service/queue/states.py`)."""


class Verdict(_View):
    """The judge's verdict. `performance`, `trials`, `details` are kept as the server sent them."""

    status: str
    diagnosis: str = ""
    task: str | None = None
    device: str | None = None
    compile_log: str | None = None
    trials: list[dict[str, Any]] = Field(default_factory=list)
    performance: dict[str, Any] | None = None
    details: dict[str, Any] = Field(default_factory=dict)
    environment: dict[str, Any] | None = None

    @property
    def correct(self) -> bool:
        return self.status == "correct"

    def speedup(self, baseline: str = "eager") -> float | None:
        return (self.performance or {}).get("speedups", {}).get(baseline)


class KernelProfile(_View):
    """One kernel of a profile (sandbox.profiling.report.KernelProfile); None where ncu gave no value."""

    name: str
    launches: int = 1
    duration_ns: float | None = None
    dram_bytes_per_s: float | None = None
    dram_pct_of_peak: float | None = None
    sm_pct_of_peak: float | None = None
    achieved_occupancy_pct: float | None = None
    registers_per_thread: int | None = None
    shared_bytes_per_block: int | None = None
    grid: list[int] | None = None
    block: list[int] | None = None
    stalls: list[dict[str, Any]] = Field(default_factory=list)
    unavailable: list[str] = Field(default_factory=list)


class SubmissionProfile(_View):
    """GET /v1/submissions/{id}/profile: `status` pending, ok, unavailable or failed; `text` for a prompt."""

    submission_id: str
    status: str
    gpu_seconds: float | None = None
    profile: dict[str, Any] | None = None
    text: str | None = None

    @property
    def kernels(self) -> list[KernelProfile]:
        return [KernelProfile(**k) for k in (self.profile or {}).get("kernels", [])]

    @property
    def reason(self) -> str | None:
        return (self.profile or {}).get("reason")


class SubmissionAccepted(_View):
    id: str
    status: str
    location: str | None = None
    duplicate: bool = False


class SharedHeaders(_View):
    """A worker's build of the shared precompiled headers, while a submission waits on it."""

    state: str = Field(description="building or done")
    ready: int = 0
    total: int = 0
    building: str | None = None
    """The flags of the variant being built now ("plain": no extra flags)."""
    building_s: float | None = None

    def line(self) -> str:
        """"shared headers: building -O2 for 42 s (1 of 3 ready)": what a first build is waiting for."""
        now = f"building {self.building} for {self.building_s or 0:.0f} s, " if self.building else ""
        return f"shared precompiled headers: {now}{self.ready} of {self.total} ready"


class Submission(_View):
    id: str
    task: str
    submitter: str | None = None
    model: str | None = None
    sample_index: int | None = None
    status: str = Field(description="queued, compiling, running or done")
    stage: str
    position: int | None = None
    created_at: dt.datetime | None = None
    verdict: Verdict | None = None
    text_sha256: str | None = None
    """sha256 of the text as sent (UTF-8): what a caller matches against its own samples."""
    public: bool = False
    """The submitter made the source public."""
    source_public: bool = False
    """Anyone may read the source now (`public`, or the operator's JUDGE_SOURCES_PUBLIC_AFTER has passed)."""
    shared_headers: SharedHeaders | None = None
    """While it waits and a worker still builds the shared precompiled headers: how far (a first build waits)."""

    @property
    def done(self) -> bool:
        return self.status == "done"


class SubmissionSummary(_View):
    """One line of GET /v1/submissions: the verdict's status alone (`submission(id)` has the whole verdict)."""

    id: str
    task: str
    model: str | None = None
    sample_index: int | None = None
    tags: list[str] = Field(default_factory=list)
    status: str = Field(description="queued, compiling, running or done")
    stage: str
    verdict: str | None = None
    """The verdict's status once done (correct, incorrect, ...)."""
    median_ms: float | None = None
    created_at: dt.datetime | None = None

    @property
    def done(self) -> bool:
        return self.status == "done"


class TaskSummary(_View):
    id: str
    title: str
    kernelbench_id: str
    official_shape: list[int]
    judged_shape: list[int] | None = None
    """The input size judged on the service's host: official on a GPU, the task's CPU size on the CPU."""
    judged_device: str | None = None
    """"cuda" or "cpu": the device type the service's host judges on."""
    variant: str = "forward"
    """"forward" (the loss) or "training" (the loss and its gradient, `forward_task` extended)."""
    forward_task: str | None = None
    languages: list[str] = Field(default_factory=list)
    """The kernel languages the service's host judges (cuda, triton, cute, tilelang)."""


class Task(TaskSummary):
    problem_source: str = ""
    forbidden_operators: list[str] = Field(default_factory=list)
    baselines: list[dict[str, Any]] = Field(default_factory=list)


class LeaderboardEntry(_View):
    rank: int
    name: str
    submitter: str
    model: str | None = None
    submission_id: str
    median_ms: float | None = None
    speedup_eager: float | None = None
    speedup_compile: float | None = None
    speed_of_light: float | None = None


class DeviceBoard(_View):
    device_name: str
    entries: list[LeaderboardEntry]


class Leaderboard(_View):
    task: str
    by: str
    sort: str
    devices: list[DeviceBoard]


class RejectedLine(_View):
    line: int
    error: str | Any


class BatchAccepted(_View):
    id: str
    url: str | None = None
    accepted: int
    duplicates: int = 0
    rejected: list[RejectedLine] = Field(default_factory=list)


class Metrics(_View):
    """The numbers papers report, for a batch or one (task, model) of it."""

    samples: int = 0
    compile_rate: float | None = None
    correct_rate: float | None = None
    fast_p: dict[str, dict[str, float | None]] = Field(default_factory=dict)
    """By baseline ("eager", "compile"), then by threshold p ("0", "1", "1.5", "2")."""
    geomean_speedup: dict[str, float | None] = Field(default_factory=dict)
    pass_at_k: dict[str, float | None] = Field(default_factory=dict)
    """By k ("1", "2", ...): the unbiased estimator 1 - C(n-c, k) / C(n, k), averaged over tasks."""
    best_of_k_speedup: dict[str, dict[str, float | None]] = Field(default_factory=dict)


class TaskModelMetrics(Metrics):
    task: str
    model: str | None = None


class BatchMetrics(_View):
    overall: Metrics
    by_task_model: list[TaskModelMetrics] = Field(default_factory=list)


class Batch(_View):
    id: str
    name: str | None = None
    state: str = Field(description="running, done or cancelled")
    created_at: dt.datetime | None = None
    finished_at: dt.datetime | None = None
    total: int = 0
    counts: dict[str, int] = Field(default_factory=dict)
    """Samples by job state (queued, compiling, compiled, running, done)."""
    verdicts: dict[str, int] = Field(default_factory=dict)
    """Finished samples by verdict status."""
    duplicates: int = 0
    progress: float = 0.0
    eta_s: float | None = None
    metrics: Metrics | BatchMetrics | dict[str, Any] | None = None

    @property
    def finished(self) -> bool:
        return self.state != "running"


class ResultRow(_View):
    """One line of a batch's results (GET /v1/batches/{id}/results)."""

    line: int | None = None
    submission_id: str | None = None
    task: str | None = None
    model: str | None = None
    sample_index: int | None = None
    status: str | None = None
    duplicate_of: str | None = None
    median_ms: float | None = None
    speedup_eager: float | None = None
    speedup_compile: float | None = None
    speed_of_light_fraction: float | None = None
    compiled: bool | None = None
    correct: bool | None = None
    diagnosis: str | None = None
    metadata: dict[str, Any] | None = None


class RewardResult(_View):
    index: int
    submission_id: str | None = None
    status: str | None = None
    reward: float | None = Field(description="None when unfinished at the deadline")
    terms: dict[str, float] = Field(default_factory=dict)
    speedup_eager: float | None = None
    diagnosis: str | None = None


class Rewards(_View):
    batch_id: str | None = None
    results: list[RewardResult]
    complete: bool

    @property
    def rewards(self) -> list[float]:
        """The scalar rewards in the order the completions were given; 0.0 for one unfinished at the deadline
        (use `results` to tell those apart)."""
        return [r.reward if r.reward is not None else 0.0 for r in sorted(self.results, key=lambda r: r.index)]
