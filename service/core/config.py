"""Every setting of the service in one pydantic-settings class, read from the environment.

Variables are prefixed ``JUDGE_`` except ``DATABASE_URL``. The sandbox reads its own variables
(``JUDGE_BUILD_ROOT``, ``JUDGE_CACHE_ROOT``, ``JUDGE_ISOLATION``, ``JUDGE_COMPILE_JOBS``) directly.
"""

from __future__ import annotations

import datetime as dt
import enum
import functools
import os
from pathlib import Path

from pydantic import AliasChoices, Field, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from reference import UnknownTask, task_id


class JudgeMode(str, enum.Enum):
    """How a worker judges a job."""

    SANDBOX = "sandbox"
    """The real judge: sandbox.prepare (compile pool) then sandbox.execute (one per device)."""
    COMPILE_ONLY = "compile-only"
    """Load testing only: the real sandbox.prepare (extract, static checks, cached compile), then a
    synthetic `correct` verdict *without running the candidate* (no performance, never ranked)."""


def default_data_dir() -> Path:
    """The user's data directory for kernel-judge (XDG: `$XDG_DATA_HOME`, else ~/.local/share). It is the same
    whatever directory a command runs in, so `keys create` run anywhere writes the database `serve` reads."""
    base = os.environ.get("XDG_DATA_HOME") or Path.home() / ".local" / "share"
    return Path(base) / "kernel-judge"


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="JUDGE_", extra="ignore")

    database_url: str | None = Field(default=None, validation_alias=AliasChoices("DATABASE_URL", "JUDGE_DATABASE_URL"))
    """SQLAlchemy URL. Unset: a SQLite file at data_dir/judge.db (WAL mode)."""
    data_dir: Path = Field(default_factory=default_data_dir)
    """Where the default SQLite database lives (a relative JUDGE_DATA_DIR is taken from the current directory)."""
    admin_key: str | None = None
    """Bearer token allowed to mint, list and revoke API keys over HTTP. Unset: admin routes answer 403."""
    local_worker_pid: int | None = None
    """The worker `kernel-judge serve` started beside this API (set by serve itself): /readyz answers 503 until it has
    registered, because what the service can judge (a CUDA candidate refused at once on a CPU-only host) is read from
    the registered workers, and a submission sent before that would wait for a worker that will never claim it."""

    # --- submissions ---------------------------------------------------------------------------
    max_source_bytes: int = 256 * 1024
    """Largest accepted candidate (UTF-8 bytes of the `source` field); larger answers 413.
    A long LLM completion with reasoning is ~20-60 KiB."""
    max_request_bytes: int = 512 * 1024
    """Largest accepted request body (source + metadata + JSON escaping); larger answers 413."""
    highlight_cpu_s: float | None = None
    """CPU seconds a submission page may spend colouring its source before showing it as plain escaped text
    (service/web/highlight.py); unset: HIGHLIGHT_CPU_S there, which says why. Raised only to measure."""
    sources_public_after: dt.datetime | None = None
    """The end of a competition (ISO 8601: `2026-12-31` or `2026-12-31T18:00:00+01:00`; no zone means UTC). Once it
    has passed, the source of every submission sent before it is public: on its page and through
    GET /v1/submissions/{id}/source, to anyone. Submissions sent after it stay private unless their submitter made
    them public. Unset: a source is readable only by its submitter, the admin key, and anyone once its submitter
    made it public (service/visibility.py has the policy)."""

    # --- rate limits and quotas (per API key) --------------------------------------------------
    rate_limit_per_minute: float = 600.0
    """Token-bucket refill rate for POST /v1/submissions, per key (kept in the database, so it holds
    across API processes)."""
    rate_limit_burst: int = 100
    """Bucket size: how many submissions a key may send at once before being throttled."""
    queue_quota: int = 2000
    """Most unfinished (not `done`) submissions one key may have; past it POST answers 429."""
    quota_retry_after_s: int = 30
    """Retry-After sent with a queue-quota 429."""

    # --- workers -------------------------------------------------------------------------------
    devices: str = "auto"
    """Comma-separated devices a worker executes on, e.g. "cuda:0,cuda:1" or "cpu". "auto": one executor
    per visible GPU (CUDA_VISIBLE_DEVICES), or "cpu" (the tasks' CPU size) when there is none."""
    worker_judges: str | None = None
    """What a worker says it can judge, instead of what it finds (sandbox/needs.py): "gpu" and kernel language ids,
    comma-separated, e.g. "gpu,cuda,triton". Unset: "gpu" when its devices are GPUs, and the languages installed.
    Only for a worker whose judge is known to differ from its devices (a test of the claim rules)."""
    role: str = Field(default="all", pattern="^(all|build|run)$")
    """What `kernel-judge worker` does (service/worker/roles.py): "all" builds and runs (the default, and `serve`'s
    worker); "build" only builds and publishes artifacts (a CPU node, no GPU); "run" runs what builders built, and
    builds itself only while no builder is alive. `--role` overrides it."""
    build_target: str | None = Field(default=None, pattern="^(cpu|cuda)$")
    """What a worker builds for: "cuda" or "cpu". Unset: its devices' kind. A builder on a CPU node that builds for
    GPU workers sets "cuda", and TORCH_CUDA_ARCH_LIST to the GPUs' architectures (part of the build key, which the
    run worker derives itself: both must agree, or the run worker builds again)."""
    compile_workers: int = Field(default_factory=lambda: max(1, (os.cpu_count() or 2) // 2))
    """Parallel sandbox.prepare calls (compilation is CPU-bound) per worker process."""
    lease_s: float = 120.0
    """A claimed job belongs to its worker until this long after the last heartbeat; then another worker
    reclaims it. Heartbeats come every lease_s / 4."""
    poll_s: float = 0.5
    """How often an idle worker looks for queued jobs. A new submission or batch wakes it at once
    (service/queue/wakeup.py); the poll catches what no wake-up announces (retries coming due) and lost ones."""
    profile_unclaimed_after_s: float = Field(default=60.0, ge=0)
    """A pending profile of a judged submission that no worker has taken this long after its verdict (its worker
    stopped in between, or it was asked for after the verdict) is taken up by an idle worker
    (service/profiles/recovery.py). The judging worker takes it milliseconds after the verdict."""
    claim_window: int = Field(default=32, ge=0)
    """How far a claim may reorder the queue (service.queue.order): it takes the job with the longest expected
    device time among the first `claim_window` places of the fair order, so long jobs start first and short ones
    fill the end of a batch on every GPU; a job is overtaken by at most claim_window - 1 jobs of its batch (or
    submissions made after it). 0 or 1: the plain fair order. Expected times: service.queue.lengths."""
    max_attempts: int = 3
    """system_error verdicts are retried until a job has failed this many times, then stored as final."""
    retry_backoff_s: float = 30.0
    """Backoff after the n-th system_error: retry_backoff_s * 2**(n-1)."""
    max_worker_crashes: int = 2
    """A job whose worker died (lease expired) this many times gets a final runtime_error verdict."""
    shutdown_grace_s: float = 60.0
    """On SIGTERM a worker finishes running jobs for up to this long, releasing everything else."""
    warm_spares: int | None = None
    """Pre-started judge children kept ready per device (sandbox/execution/warm.py): a candidate is handed one with
    its interpreter, torch and device context already up, so the start-up is not on the device's clock. Unset: three
    per GPU (service/worker/judging.py GPU_SPARES) and none for the CPU device (whose spare may only start
    while no candidate is timed, so it buys no throughput there); 0: a child per candidate (cold) everywhere;
    N: N per device, the CPU included."""
    warm_standby: int | None = None
    """Children kept per device beside the ready ones, started as far as `Started` (bubblewrap, Python, torch: the
    CPU-only ~3 s of a start) but with no task and no device context (sandbox/execution/warm.py): a ready spare
    handed out is replaced by setting one of these up (~0.5 s of device phase) instead of a whole start, so that
    runs of short candidates (~0.5 s each) do not empty the pool. Each costs host memory only (an interpreter
    with torch imported). Unset: four per GPU (GPU_STANDBY), none for the CPU device; N: N per device where
    spares are kept. How many start at once on the host: JUDGE_SPARE_START_SLOTS (sandbox/config.py)."""
    warm_headers: str = "-O2,plain,-O3"
    """The shared precompiled headers a worker builds in the background when it starts (sandbox/build/warm.py), one
    set of extra_cflags per comma, in order (`plain`: no extra flags); `off`: none, each is then built by the first
    candidate that needs it. A first C++ build otherwise waits minutes for its flags' header on a small host (170 s
    on a loaded 2-core box); its progress shows in /readyz, the submission's JSON and page, and `submit --wait`."""
    warm_baselines: str = "kl_div,cross_entropy"
    """The tasks whose reference a CPU worker compiles with torch.compile in the background as it starts (the first at
    the worker's priority, the rest niced; service/worker/warmup.py), comma-separated; `off`: none. The first
    candidate of a task otherwise waits for that compile inside its baselines' measurement (on an idle 2-core box
    23 s, 7 s with the graphs compiled ahead). Only the compile is done ahead; the baselines are still timed when a
    candidate first needs them."""
    mode: JudgeMode = JudgeMode.SANDBOX
    """"sandbox" (the real judge) or "compile-only" (load tests only; see JudgeMode)."""
    timing_budget_ms: float | None = None
    """Override JudgeConfig.timing_budget_ms (time spent in timed repetitions)."""
    trials_per_distribution: int | None = None
    """Override JudgeConfig.trials_per_distribution."""
    compile_timeout_s: float | None = None
    """Override JudgeConfig.compile_timeout_s (a build's limit; the watchdog's compiling limit follows it)."""
    run_timeout_s: float | None = None
    """Override JudgeConfig.run_timeout_s (the execution child's wall limit; the watchdog's running limit follows
    it)."""
    stall_margin_s: float = 120.0
    """Slack the watchdog (service/worker/watchdog.py) adds to a phase's own limit before a job held in that phase
    counts as stalled: its thread stacks are logged, the worker reports itself not ready and the job goes back to
    the queue. It covers the build child's 30 s wall slack over its timeout and a precompiled header built on first
    need (~40 s on 2 cores). A false alarm costs a re-claim of a cached build; a missed stall, the worker."""

    # --- retention (service.maintenance) -------------------------------------------------------
    build_cache_max_bytes: int | None = None
    """Most bytes the build cache may hold; least recently used builds beyond it are evicted by
    `run_maintenance` (workers run it every maintenance_interval_s). Unset: never evicted. A CPU build of the
    test candidate is ~1 MB; a CUDA load_inline build is ~5-20 MB."""
    artifact_retention_days: float = 14.0
    """Run directories left by killed workers, and claim records of finished jobs, older than this are pruned
    (verdicts never are)."""
    maintenance_interval_s: float = 600.0
    """How often a worker runs the retention pass (when build_cache_max_bytes is set)."""

    # --- API -----------------------------------------------------------------------------------
    sse_poll_s: float = 0.5
    """How often GET /v1/submissions/{id}/events checks the database for a status change; a stored verdict wakes
    it at once (service/api/verdict_waits.py), so this paces the stage changes in between."""
    sse_max_s: float = 3600.0
    """An event stream closes after this long even when the job is not done (the client reconnects)."""
    sse_max_streams_per_key: int = Field(default=20, ge=1)
    """Most event streams (GET /v1/submissions/{id}/events) one caller may hold open at once in one API process,
    counted per API key (per client address without a key); one more answers 429 saying so. A stream holds a
    connection for up to sse_max_s, though idle it costs no database reads of its own (service/api/stream_hub.py).
    To follow many submissions, follow their batch (GET /v1/batches/{id}) or GET each one instead."""

    # --- batches and rewards (service.batches) -------------------------------------------------
    max_batch_bytes: int = 64 * 1024 * 1024
    """Largest POST /v1/batches or /v1/rewards body; larger answers 413. 10,000 completions of ~6 KiB fit."""
    max_batch_samples: int = 10_000
    """Most samples (lines) in one batch or rewards call; more answers 413."""
    batch_queue_quota: int = 50_000
    """Most unfinished batch jobs one key may have queued or running; past it POST answers 429."""
    rewards_poll_s: float = 0.25
    """How often a blocked POST /v1/rewards checks the database for its verdicts."""
    rewards_max_wait_s: float = 3600.0
    """Longest a POST /v1/rewards call may hold its connection, whatever its `deadline_s` asks (a proxy in
    front of the service may need less); past it the call answers with `complete: false`."""

    @field_validator("sources_public_after")
    @classmethod
    def _naive_utc(cls, value: dt.datetime | None) -> dt.datetime | None:
        # Stored times are naive UTC (service/db/models.py), so the date is compared as one.
        if value is not None and value.tzinfo is not None:
            value = value.astimezone(dt.timezone.utc).replace(tzinfo=None)
        return value

    @field_validator("warm_headers")
    @classmethod
    def _flag_sets(cls, value: str) -> str:
        for flags in _flag_sets(value):
            bad = [flag for flag in flags if not flag.startswith("-")]
            if bad:
                raise ValueError(f"{bad[0]!r} is no compiler flag: give sets of flags such as -O2,plain,-O3, or off")
        return value

    @field_validator("warm_baselines")
    @classmethod
    def _warm_tasks(cls, value: str) -> str:
        for task in _task_list(value):
            try:
                task_id(task)  # the id alone: the settings are read by every command, and a task imports torch
            except UnknownTask as exc:  # a KeyError, which pydantic would not report as the setting's error
                raise ValueError(f"{exc}; or off") from None
        return value

    def warm_baseline_tasks(self) -> list[str]:
        """`warm_baselines` as task ids, in order."""
        return _task_list(self.warm_baselines)

    def warm_flag_sets(self) -> list[tuple[str, ...]]:
        """`warm_headers` as the sandbox takes it: one tuple of extra_cflags per variant."""
        return _flag_sets(self.warm_headers)

    @property
    def db_url(self) -> str:
        return self.database_url or f"sqlite:///{(self.data_dir / 'judge.db').resolve()}"

    def device_list(self) -> list[str]:
        if self.devices.strip() != "auto":
            return [d.strip() for d in self.devices.split(",") if d.strip()]
        import torch

        count = torch.cuda.device_count() if torch.cuda.is_available() else 0
        return [f"cuda:{i}" for i in range(count)] or ["cpu"]


def _off(value: str) -> bool:
    """Whether a list setting (warm_headers, warm_baselines) says none."""
    return value.strip().lower() in ("off", "none", "")


def _task_list(value: str) -> list[str]:
    if _off(value):
        return []
    return [part.strip() for part in value.split(",") if part.strip()]


def _flag_sets(value: str) -> list[tuple[str, ...]]:
    if _off(value):
        return []
    return [() if part.strip() == "plain" else tuple(part.split()) for part in value.split(",")]


@functools.cache
def get_settings() -> Settings:
    return Settings()
