"""Request and response bodies of /v1/batches and /v1/rewards (what OpenAPI documents)."""

from __future__ import annotations

import datetime as dt
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from service.api.schemas import NO_NUL, ONE_TEXT, PlainJson, SampleFields, Tag, Text, json_integer
from service.batches.rewards import RewardParams
from service.queue.states import JobState

BatchState = Literal["running", "done", "cancelled"]


class Sample(SampleFields):
    """One sample of a batch: one JSON object per line of a JSONL upload, or one item of a JSON list (or of
    POST /v1/rewards). Its common fields are POST /v1/submissions' (service.api.schemas.SampleFields): every
    entry point refuses the same values."""

    model_config = ConfigDict(extra="forbid", json_schema_extra={"examples": [{
        "task": "kl_div", "completion": "Let me think...\n```python\nclass ModelNew(nn.Module): ...\n```",
        "model": "my-llm-7b", "sample_index": 3, "sampling": {"temperature": 0.8}, "metadata": {"run": 42}}]})

    source: Text | None = Field(default=None, description="A Python module defining ModelNew (or a completion).")
    completion: Text | None = Field(default=None, description="A raw LLM completion; the last ```python block that "
                                                               "defines ModelNew is judged. Exactly one of source "
                                                               "and completion.")
    metadata: PlainJson = Field(default_factory=dict, json_schema_extra={"propertyNames": {"pattern": NO_NUL}},
                                description="Free-form JSON, returned with the results (as `sampling`).")
    parent_id: Text | None = Field(default=None, max_length=32,
                                   description="The submission this one refines (the previous turn).")
    turn: int | None = Field(default=None, ge=0, le=1000, description="Refinement turn (0 = first attempt).")

    @field_validator("turn", mode="before")
    @classmethod
    def _json_integer_turn(cls, value: Any) -> Any:
        return json_integer(value)

    @model_validator(mode="after")
    def _one_text(self) -> Sample:
        if (self.source is None) == (self.completion is None):
            raise ValueError(ONE_TEXT)
        return self

    @property
    def text(self) -> str:
        return self.source if self.source is not None else self.completion  # type: ignore[return-value]


class BatchCreate(BaseModel):
    """The JSON-object form of an upload (a bare JSON list of samples is accepted too)."""

    model_config = ConfigDict(extra="forbid")

    name: Text | None = Field(default=None, max_length=200)
    samples: list[Any] = Field(description="Samples (validated one by one: a bad one is reported, not fatal).")
    tags: list[Tag] = Field(default_factory=list, max_length=32)


class LineError(BaseModel):
    line: int = Field(description="1-based line of the JSONL upload (item index + 1 for a JSON list).")
    error: str = Field(description="What is wrong and what to send instead.")


class BatchAccepted(BaseModel):
    id: str
    url: str
    accepted: int = Field(description="Samples stored (duplicates included).")
    duplicates: int = Field(description="Accepted samples whose code repeats an earlier sample of the same task in "
                                        "this batch: judged once, verdict shared.")
    judged: int = Field(description="Distinct candidates queued for judging (accepted - duplicates).")
    rejected: list[LineError]


class Metrics(BaseModel):
    """The numbers papers report (service.batches.metrics has the definitions)."""

    model_config = ConfigDict(extra="allow")

    samples: int
    unjudged: int
    compile_rate: float | None
    correct_rate: float | None
    fast_p: dict[str, dict[str, float | None]]
    geomean_speedup: dict[str, float | None]
    pass_at_k: dict[str, float]
    best_of_k_speedup: dict[str, dict[str, float | None]]


class GroupMetrics(Metrics):
    task: str
    model: str | None


class BatchMetrics(BaseModel):
    overall: Metrics
    by_task_model: list[GroupMetrics]


class BatchOut(BaseModel):
    id: str
    name: str | None
    kind: str
    submitter: str
    tags: list[str]
    state: BatchState
    created_at: dt.datetime
    finished_at: dt.datetime | None
    cancelled_at: dt.datetime | None
    total: int = Field(description="Samples (duplicates included).")
    counts: dict[str, int] = Field(description="Judged jobs by JobState (duplicates have no job of their own).")
    verdicts: dict[str, int] = Field(description="Samples by verdict status (duplicates counted with their verdict).")
    duplicates: int
    rejected: list[LineError]
    progress: float = Field(description="Fraction of samples with a final outcome (verdict or cancelled).")
    eta_s: float | None = Field(description="Seconds left at this batch's measured throughput; null until one job "
                                            "finished or once the batch is over.")
    metrics: Metrics | None = Field(default=None, description="Overall metrics (null in listings).")
    url: str


class BatchList(BaseModel):
    items: list[BatchOut]
    next_cursor: str | None = Field(description="Pass as ?cursor= for the next (older) page; null at the end.")


class ResultRow(BaseModel):
    """One row of GET /v1/batches/{id}/results, in line order."""

    line: int
    submission_id: str
    task: str
    model: str | None
    sample_index: int | None
    turn: int | None
    parent_id: str | None
    state: JobState | None = Field(description="The judged job's state (the original's, for a duplicate).")
    status: str | None = Field(description="Verdict status; null while unfinished or if cancelled.")
    duplicate_of: str | None
    median_ms: float | None
    speedup_eager: float | None
    speedup_compile: float | None
    speed_of_light_fraction: float | None
    compiled: bool | None
    correct: bool | None
    diagnosis: str | None = Field(description="The first 300 characters; null for a private sample read without its "
                                                "submitter's key or the admin key (it quotes the source).")
    metadata: dict[str, Any] | None


# --- rewards --------------------------------------------------------------------------------------

class RewardsRequest(BaseModel):
    # allow_inf_nan: Python's JSON reader takes NaN and Infinity, which no comparison or response can carry.
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False, json_schema_extra={"examples": [{
        "task": "kl_div", "completions": ["...```python\nclass ModelNew...```", "..."], "model": "policy-step-120",
        "deadline_s": 300, "reward": {"speedup_transform": "log"}}]})

    task: Text | None = Field(default=None, max_length=64, description="Default task of the items.")
    completions: list[Any] = Field(min_length=1, description="Raw completions (strings) or sample objects "
                                                             "(as in a batch: task, completion or source, ...).")
    model: Text | None = Field(default=None, max_length=200, description="Default model of the items.")
    name: Text | None = Field(default=None, max_length=200)
    deadline_s: float = Field(default=600.0, gt=0, le=3600, description="Answer by then, finished or not.")
    cancel_unfinished: bool = Field(default=False, description="At the deadline, cancel what is still queued.")
    reward: RewardParams = Field(default_factory=RewardParams)


class RewardItem(BaseModel):
    index: int
    submission_id: str | None = Field(description="Null when the item was refused (see diagnosis).")
    status: str | None = Field(description="Verdict status; null if unfinished at the deadline or refused.")
    reward: float | None
    terms: dict[str, float]
    speedup_eager: float | None
    speedup_compile: float | None
    duplicate_of: str | None
    diagnosis: str | None


class RewardsOut(BaseModel):
    batch_id: str | None
    complete: bool = Field(description="True when every item has its verdict (or was refused).")
    elapsed_s: float
    results: list[RewardItem]
