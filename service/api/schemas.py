"""Request and response bodies of the HTTP API (what OpenAPI documents)."""

from __future__ import annotations

import datetime as dt
import math
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, field_validator, model_validator

from reference import all_tasks
from sandbox.profiling.report import Profile
from sandbox.verdict import Status, Verdict
from service.queue.states import JobState, PublicStatus

MAX_SAMPLE_INDEX = 2**63 - 1
"""The largest `sample_index`: the column is a signed 64-bit integer (BIGINT) on both databases."""
MAX_JSON_INT = 2**63 - 1
"""Integers inside `sampling` stay within signed 64 bits, so every JSON reader (and both databases) reads them
back unchanged."""


MAX_JSON_DEPTH = 32
"""Nesting of objects and lists inside `sampling` and `metadata`: deeper than any run bookkeeping, and far from the
recursion limits of the readers of these columns (this module's checks, json, PostgreSQL's jsonb)."""


def _plain_text(text: str) -> str:
    # PostgreSQL text cannot hold NUL, and no legitimate name, tag or Python source contains one.
    if "\x00" in text:
        raise ValueError(f"contains a NUL character (at offset {text.index(chr(0))}); remove it")
    if not text.isascii():
        # A JSON escape can carry an unpaired surrogate (Python's json reads "\ud800"); no database stores it.
        try:
            text.encode("utf-8")
        except UnicodeEncodeError as exc:
            raise ValueError(f"is not valid UTF-8 (an unpaired surrogate at character {exc.start}); "
                             "send UTF-8 text") from None
    return text


NO_NUL = r"^[^\x00]*$"
"""The JSON Schema pattern of a string without NUL characters."""


class _DocumentNoNul:
    """Adds NO_NUL to a string's JSON schema, so the document says what _plain_text enforces (with its message)."""

    def __get_pydantic_json_schema__(self, core_schema: Any, handler: Any) -> dict[str, Any]:
        schema = handler(core_schema)
        schema.setdefault("pattern", NO_NUL)
        return schema


Text = Annotated[str, AfterValidator(_plain_text), _DocumentNoNul()]
"""A string without NUL characters (and valid UTF-8): every text field clients send."""

Tag = Annotated[Text, Field(max_length=200)]


def _plain_json(value: Any, path: str = "", depth: int = 0) -> None:
    """Refuse what JSON columns cannot store faithfully: NaN and infinities (PostgreSQL rejects them, SQLite
    stores null), NUL characters, integers beyond 64 bits; and nesting deeper than MAX_JSON_DEPTH."""
    if isinstance(value, float) and not math.isfinite(value):
        raise ValueError(f"{path or 'value'} is {value}; only finite numbers are accepted")
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) > MAX_JSON_INT:
        raise ValueError(f"{path or 'value'} is beyond 64 bits; send it as a string")
    if isinstance(value, (dict, list)) and depth >= MAX_JSON_DEPTH:
        raise ValueError(f"{path or 'value'} nests objects and lists more than {MAX_JSON_DEPTH} deep; flatten it")
    if isinstance(value, str):
        _plain_text(value)
    elif isinstance(value, dict):
        for key, item in value.items():
            _plain_text(key)
            _plain_json(item, f"{path}.{key}" if path else key, depth + 1)
    elif isinstance(value, list):
        for i, item in enumerate(value):
            _plain_json(item, f"{path}[{i}]", depth + 1)


def _plain_json_object(value: dict[str, Any]) -> dict[str, Any]:
    _plain_json(value)
    return value


PlainJson = Annotated[dict[str, Any], AfterValidator(_plain_json_object)]
"""A free-form JSON object both databases store and give back unchanged."""


def json_integer(value: Any) -> Any:
    """What JSON Schema calls an integer: a number without a fractional part (3 or 3.0); never true/false or "3",
    which pydantic's lax mode would turn into 1/0 and 3."""
    if isinstance(value, (bool, str, bytes)):
        # ValueError, not TypeError: pydantic turns only ValueError into a validation error (a 422).
        raise ValueError("must be a JSON integer, not a boolean or a string")  # noqa: TRY004
    return value


PUBLIC_FIELD = ("Make the source readable by anyone (its page and GET /v1/submissions/{id}/source). Default false: "
                "private to its submitter and the admin key until they make it public (PATCH /v1/submissions/{id}) "
                "or the operator's JUDGE_SOURCES_PUBLIC_AFTER passes. The verdict is public either way.")


PROFILE_FIELD = ("Also profile its kernels with Nsight Compute once it is judged (on a GPU worker; a CPU worker "
                 "answers \"not available on this host\"): GET /v1/submissions/{id}/profile. Never changes the "
                 "verdict or the ranked time.")


class SampleFields(BaseModel):
    """What describes a sample, whichever way it arrives (POST /v1/submissions, a line of a batch, an item of
    POST /v1/rewards): one definition, so every entry point refuses the same values with the same message."""

    # Documented as the list of task ids; an unknown one answers 404 listing them (not a bare 422).
    task: Text = Field(max_length=64, description="Task id, e.g. `kl_div` (see GET /v1/tasks).",
                       json_schema_extra={"enum": [t.id.value for t in all_tasks()]})
    model: Text | None = Field(default=None, max_length=200, description="Name of the model that wrote it.")
    sampling: PlainJson = Field(
        default_factory=dict, json_schema_extra={"propertyNames": {"pattern": NO_NUL}},
        description="Sampling parameters, free-form JSON: finite numbers within 64 bits, no NUL in any string.")
    sample_index: int | None = Field(default=None, ge=0, le=MAX_SAMPLE_INDEX,
                                     description="Index of this sample among several (an integer, not a boolean).")
    tags: list[Tag] = Field(default_factory=list, max_length=32, description="Free-form labels.")
    # strict: JSON true or false only (lax mode would take 1, "yes" or "on", which the schema calls invalid).
    public: bool = Field(default=False, strict=True, description=PUBLIC_FIELD)
    profile: bool = Field(default=False, strict=True, description=PROFILE_FIELD)

    @field_validator("sample_index", mode="before")
    @classmethod
    def _json_integer(cls, value: Any) -> Any:
        return json_integer(value)


class ErrorItem(BaseModel):
    loc: list[str | int] = Field(description="Where: e.g. `[\"body\", \"sample_index\"]` or `[\"query\", \"task\"]`.")
    msg: str = Field(description="What is wrong with it.")
    type: str | None = Field(default=None, description="pydantic's error type, e.g. `missing`, `json_invalid`.")


class ErrorBody(BaseModel):
    """The body of every error response (4xx and 5xx)."""

    detail: str = Field(description="What went wrong and what to change.")
    errors: list[ErrorItem] = Field(default_factory=list, description="The offending fields, if any.")
    valid_task_ids: list[str] | None = Field(default=None, description="With an unknown task: the valid ids.")
    limit_bytes: int | None = Field(default=None, description="With a 413: the limit that was exceeded.")


ONE_TEXT = "give exactly one of `source` (a module) and `completion` (a raw LLM answer)"
"""The refusal of a sample with neither or both texts, the same at every entry point."""

NOT_BLANK = {"minLength": 1, "pattern": r"^[^\x00]*[^\x00\s][^\x00]*$"}
"""The JSON schema of a candidate's text: not blank (a non-space character somewhere) and without NUL."""


class SubmissionCreate(SampleFields):
    """A candidate for one task: exactly one of `source` and `completion`, as in a line of a batch. Either may be
    a bare Python module defining `ModelNew` or a raw LLM completion (the last ```python block is the candidate);
    a `completion` is stored and judged as the `source`."""

    model_config = ConfigDict(extra="forbid", json_schema_extra={
        "oneOf": [{"required": ["source"]}, {"required": ["completion"]}],
        "examples": [{"task": "kl_div", "source": "import torch\n...\nclass ModelNew(torch.nn.Module): ...",
                      "model": "my-llm-7b", "sampling": {"temperature": 0.8, "top_p": 0.95}, "sample_index": 3,
                      "tags": ["run-42"], "idempotency_key": "run-42/kl_div/3"}]})

    # Typed str with no null allowed (the schema says a string), optional only so `completion` can stand in; the
    # validator below fills it. The dependency that parses the body refuses a blank one with its own message.
    source: Text = Field(default=None, description="The candidate module or raw completion, UTF-8 text, not blank. "  # type: ignore[assignment]
                                                   "Exactly one of source and completion.",
                         json_schema_extra=NOT_BLANK)
    completion: Text = Field(default=None, description="A raw LLM completion (the last ```python block that "  # type: ignore[assignment]
                                                       "defines ModelNew is judged), as in a batch line: the same "
                                                       "as sending it as `source`.", json_schema_extra=NOT_BLANK)
    idempotency_key: Text | None = Field(
        default=None, min_length=1, max_length=200,
        description="Client key: resubmitting with the same key returns the first submission instead of a new one. "
                    "May also be sent as the `Idempotency-Key` header.")

    @model_validator(mode="after")
    def _one_text(self) -> SubmissionCreate:
        if (self.source is None) == (self.completion is None):
            raise ValueError(ONE_TEXT)
        if self.completion is not None:  # one field downstream: the stored text is the source either way
            self.source, self.completion = self.completion, None
        return self


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


class VerdictView(Verdict):
    """The verdict as the API shows it: whole to whom may read the source, else without its diagnostics
    (service/visibility.py), whose digest of the judged code is then null."""

    judged_sha256: str | None = Field(alias="source_sha256", description=(
        "sha256 of what was judged; null where the viewer may not read the source (a digest confirms a guess)."))


class HeaderVariant(BaseModel):
    flags: str = Field(description="The extra_cflags it serves (\"plain\": none).")
    state: Literal["waiting", "building", "ready", "failed"]
    seconds: float | None = Field(None, description="What building it took (0 when it was built already).")


class SharedHeaders(BaseModel):
    """A worker's build of the shared precompiled headers (service/worker/headers.py): started with the worker,
    before the first candidate; a candidate with the flags being built waits for them."""

    state: Literal["building", "done"] = Field(description="`done` once every variant is ready or failed.")
    ready: int = Field(description="Variants ready, of `total`.")
    total: int
    building: str | None = Field(None, description="The flags of the variant being built now.")
    building_s: float | None = Field(None, description="Seconds that build has run.")
    variants: list[HeaderVariant]
    worker: str


class SubmissionOut(BaseModel):
    id: str
    task: str
    submitter: str
    model: str | None
    sample_index: int | None
    sampling: dict[str, Any]
    tags: list[str]
    text_sha256: str | None = Field(description="sha256 of the text as sent (UTF-8); null where the viewer may not "
                                                "read the source (`diagnostics_withheld`).")
    source_sha256: str | None = Field(description="The same value as `text_sha256`, under its first name: kept for "
                                                  "existing clients.")
    status: PublicStatus = Field(description="queued, compiling, running or done.")
    stage: JobState = Field(description="The exact job state; `compiled` means built and waiting for a device.")
    position: int | None = Field(description="While queued: how many ready jobs are ahead of this one (0 = next).")
    created_at: dt.datetime
    timestamps: Timestamps
    attempts: int = Field(description="Times a worker claimed this job.")
    compile_cached: bool | None = Field(description="True when an identical build was reused.")
    verdict: VerdictView | None = Field(description="The judge's verdict, once done.")
    duplicate_of: str | None = Field(default=None, description=(
        "Set for a batch sample whose extracted source repeats an earlier sample of the same task in its batch: "
        "it was not judged again and shows that sample's job and verdict."))
    public: bool = Field(default=False, description="Its submitter made its source public.")
    source_public: bool = Field(default=False, description=(
        "Anyone may read its source now: it is `public`, or it was sent before JUDGE_SOURCES_PUBLIC_AFTER, which has "
        "passed. Otherwise only its submitter and the admin key may (GET /v1/submissions/{id}/source)."))
    waiting_for: list[str] = Field(default_factory=list, description=(
        'While queued: what judging it needs that none of the workers seen lately has ("gpu", a kernel language). '
        "It waits for a worker that has it and gets no verdict meanwhile (GET /v1/judging, docs/gpu-workers.md)."))
    diagnostics_withheld: bool = Field(default=False, description=(
        "True when this view leaves out what is made of the source (the verdict's diagnosis, compile errors and "
        "log, details, imports, trial messages) and every digest of it: a private submission read without its "
        "submitter's key or the admin key. The status and the figures are all there."))
    shared_headers: SharedHeaders | None = Field(default=None, description=(
        "While it is not done and a worker is still building the shared precompiled headers: how far (a first C++ "
        "build waits for its flags' header). Null otherwise."))


class SubmissionSummary(BaseModel):
    """One line of GET /v1/submissions."""

    id: str
    task: str
    model: str | None
    sample_index: int | None
    tags: list[str]
    status: PublicStatus
    stage: JobState
    verdict: Status | None = Field(description="The verdict's status, once done.")
    median_ms: float | None = Field(description="The candidate's median time, when it was timed.")
    created_at: dt.datetime


class SubmissionPage(BaseModel):
    items: list[SubmissionSummary] = Field(description="Newest first.")
    next_cursor: str | None = Field(description="Pass as `cursor` for the next page; null on the last page.")


class SubmissionUpdate(BaseModel):
    """What its submitter (or the admin key) may change after sending: whether its source is public."""

    model_config = ConfigDict(extra="forbid", json_schema_extra={"examples": [{"public": True}]})

    public: bool = Field(strict=True, description="True: anyone may read the source. False: private again (unless "
                                     "JUDGE_SOURCES_PUBLIC_AFTER has published it).")


class SubmissionSource(BaseModel):
    id: str
    task: str
    source: str = Field(description="Exactly what was submitted (a bare module or a raw completion).")
    text_sha256: str = Field(description="sha256 of `source` (UTF-8).")
    source_sha256: str = Field(description="The same value as `text_sha256`, under its first name: kept for existing "
                                           "clients.")


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
    judged_shape: list[int] = Field(description=(
        "The input size judged on this host: the official shape where its worker judges on a GPU, the task's CPU "
        "size (shapes.cpu) where it judges on the CPU (JUDGE_DEVICES=cpu, or no GPU visible)."))
    judged_device: Literal["cuda", "cpu"] = Field(description="The device type this host judges on, which decides "
                                                              "judged_shape.")
    variant: str = Field("forward", description="\"forward\" (the loss) or \"training\" (loss and its gradient).")
    forward_task: str | None = Field(None, description="For a training variant: the forward task it extends.")
    languages: list[str] = Field(default_factory=list, description=(
        "The kernel languages this host judges (cuda, triton, cute, tilelang: those installed here); a candidate in "
        "another gets a compile_error with the rule unsupported_language before any build or device time."))


class TaskDetail(TaskSummary):
    problem_source: str
    shapes: Shapes
    distributions: list[str]
    tolerance: ToleranceOut
    forbidden_operators: list[str]
    requires_custom_kernel: bool
    min_bytes: int = Field(description="Bytes a perfect kernel must move at the official shape.")
    baselines: list[DeviceBaseline]
    gradient_tolerance: ToleranceOut | None = Field(
        None, description="Training variants: the tolerance on batch * gradient / scale, elementwise.")
    training_statement: str | None = Field(None, description="Training variants: what backward must produce.")


class KeyCreate(BaseModel):
    submitter: Text = Field(min_length=1, max_length=100, description="Name shown on leaderboards.")


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


class ProfileOut(BaseModel):
    """A submission's profile (issue 28): Nsight Compute's per-kernel figures, taken after the verdict."""

    submission_id: str
    judged_submission_id: str = Field(description="The submission whose kernels were profiled: this one, or for a "
                                                  "batch duplicate the sample judged in its place.")
    status: Literal["pending", "ok", "unavailable", "failed"] = Field(description=(
        "pending: not judged or not profiled yet. ok: `profile` holds the kernels. unavailable: this worker's host "
        "cannot profile (a CPU worker, no ncu, counters reserved) or the candidate did not run. failed: the "
        "profiled run did not finish; `profile.reason` says how."))
    requested_at: dt.datetime
    finished_at: dt.datetime | None = None
    gpu_seconds: float | None = Field(default=None, description="Device time the profile took, apart from the "
                                                                "judging's (never part of the ranked time).")
    profile: Profile | None = None
    text: str | None = Field(default=None, description="The profile as plain text for a prompt (under 1,500 "
                                                       "characters for up to 4 kernels).")
    withheld: bool = Field(default=False, description=(
        "True when `profile` and `text` are left out: they name the source's kernels, and the submission is private "
        "to its submitter and the admin key (send one of their keys)."))
