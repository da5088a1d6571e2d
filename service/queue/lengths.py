"""How long a job is expected to hold its device: the figure the claim order sorts on (service.queue.order).

A job's device time depends on three things known before it is claimed:

- its task: the sizes and the trials differ (kl_div reads 2 GiB a call, cross_entropy 0.5 GiB);
- whether the task is a training variant (forward + backward, its own baselines: several times a forward task);
- whether it is the first job of its task on a card in this worker: that job also pays the trusted baseline
  measurement (eager and torch.compile of the reference, sandbox.execution.baseline) and the bandwidth probe, unless the
  host's baseline cache already holds them.

The first two come from measurements: every verdict's device hold is stamped on its claim record
(`job_attempts.execute_started_at` / `execute_ended_at`, written by service.worker.holds around sandbox.execute),
and `DeviceSeconds.load` takes the median hold per task over the most recent verdicts, per GPU model
(`verdicts.device_name`) where this worker's model has enough of them, else over every model. A task with fewer
than `MIN_SAMPLES` measured holds gets the documented default below. The third is not measurable from those rows
(a hold does not say whether it measured baselines), so it is the constant `FIRST_ON_CARD_S`.

Only the order of jobs depends on these figures, never their safety: a wrong figure starts a job earlier or later.
"""

from __future__ import annotations

import statistics
import time
from collections import defaultdict
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from sqlalchemy import select

from reference import UnknownTask, get_task
from service.db.models import Job, JobAttempt, VerdictRow
from service.db.session import Database
from service.queue.states import AttemptOutcome

FORWARD_S = 2.0
"""Default hold of a forward task's job: a correct kl_div_fast holds an H100 for ~1.9-2.2 s, cross_entropy_fast
~1.2-1.3 s, a rejected candidate ~0.5-0.7 s (docs/benchmarks.md); the upper figure, since a default that is too
short would start a long job late, which is the costly mistake at the end of a batch."""
TRAINING_S = 6.0
"""Default hold of a training variant's job: forward and backward are both checked and timed, against three
baselines (eager, torch.compile, Liger-Kernel): about three forward holds."""
FIRST_ON_CARD_S = 30.0
"""Added for the first job of a task on a device of this worker: the baseline process compiles the reference with
torch.compile (tens of seconds) and times it and eager; the slowest honest hold of the H100 burst, a training
task's first job, was 32 s (docs/benchmarks.md)."""
MIN_SAMPLES = 5
"""Measured holds of a task before its median replaces the default: fewer is one outlier away from noise."""
RECENT = 2000
"""Most recent verdict holds read per refresh: the figures follow changes of judge and cards, and the read stays
one short indexed query however long the history."""
REFRESH_S = 60.0
"""A worker re-reads the figures at most this often (`DeviceSeconds.maybe_refresh`)."""


def default_seconds(task_id: str) -> float:
    """The documented default for a task: training variants hold longer than forward tasks."""
    try:
        training = get_task(task_id).training is not None
    except UnknownTask:  # a task this build does not know: claimable, ordered as a forward task
        training = False
    return TRAINING_S if training else FORWARD_S


def recent_holds(db: Database, limit: int = RECENT) -> list[tuple[str, str | None, float]]:
    """(task, GPU model, held seconds) of the most recent verdicts' device holds, newest first."""
    query = (select(Job.task_id, VerdictRow.device_name, JobAttempt.execute_started_at, JobAttempt.execute_ended_at)
             .join(Job, Job.id == JobAttempt.job_id)
             .outerjoin(VerdictRow, VerdictRow.submission_id == Job.submission_id)
             .where(JobAttempt.outcome == AttemptOutcome.VERDICT.value, JobAttempt.execute_started_at.is_not(None),
                    JobAttempt.execute_ended_at.is_not(None))
             .order_by(JobAttempt.id.desc()).limit(limit))
    with db.transaction(read_only=True) as session:
        rows = session.execute(query).all()
    return [(task, model, (end - start).total_seconds()) for task, model, start, end in rows if end >= start]


def medians(holds: Iterable[tuple[str, str | None, float]], model: str | None) -> dict[str, float]:
    """Median hold per task: over `model`'s holds where it has MIN_SAMPLES of them, else over every model's."""
    mine: dict[str, list[float]] = defaultdict(list)
    every: dict[str, list[float]] = defaultdict(list)
    for task, kind, seconds in holds:
        every[task].append(seconds)
        if model is not None and kind == model:
            mine[task].append(seconds)
    out = {}
    for task, values in every.items():
        chosen = mine[task] if len(mine[task]) >= MIN_SAMPLES else values
        if len(chosen) >= MIN_SAMPLES:
            out[task] = statistics.median(chosen)
    return out


@dataclass
class DeviceSeconds:
    """A worker's figures: measured medians per task (for its GPU model once known), defaults elsewhere, and the
    tasks each of its devices has already run (a task new to a device pays FIRST_ON_CARD_S there)."""

    devices: list[str]
    model: str | None = None
    """This worker's GPU model, as its verdicts name it (`Verdict.environment.device_name`); None until known."""
    measured: dict[str, float] = field(default_factory=dict)
    ran: dict[str, set[str]] = field(default_factory=dict)
    loaded_at: float = float("-inf")
    clock: Callable[[], float] = time.monotonic

    def load(self, db: Database) -> None:
        self.measured = medians(recent_holds(db), self.model)
        self.loaded_at = self.clock()

    def maybe_refresh(self, db: Database) -> None:
        """Re-read the measured figures when REFRESH_S has passed since the last read."""
        if self.clock() - self.loaded_at >= REFRESH_S:
            self.load(db)

    def executed(self, device: str, task_id: str, model: str | None) -> None:
        """A job of `task_id` has run on `device` (its baselines are now measured there)."""
        self.ran.setdefault(device, set()).add(task_id)
        if model and self.model is None:
            self.model = model

    def expected(self, task_id: str) -> float:
        """Expected device seconds of a job of `task_id` claimed by this worker now. With several devices the job
        goes to whichever is free first, so the first-on-card cost counts for the share of devices that lack the
        task."""
        base = self.measured.get(task_id, default_seconds(task_id))
        if not self.devices:
            return base
        lacking = sum(1 for d in self.devices if task_id not in self.ran.get(d, ()))
        return base + FIRST_ON_CARD_S * lacking / len(self.devices)
