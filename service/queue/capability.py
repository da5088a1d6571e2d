"""Which jobs a worker may claim, and what the service as a whole can judge.

A job carries what judging it needs (`jobs.needs_gpu`, `jobs.language`: sandbox/needs.py, read at submission); a
worker claims only jobs its capabilities cover (`claimable`, a condition of service/queue/claims.py's read), so a
CUDA candidate is never judged on a host without a GPU, where it would fail for the host's reason.

What the service can judge is the union of its workers' capabilities (`workers.judges`) over the workers seen
within `SEEN_WITHIN_S`, stopped or not: a GPU worker that restarts, or whose heartbeat is late, still counts, and
a submission for it waits in the queue. A service whose workers have all been away that long, or that never had
one, can judge nothing now and says so for no submission: its jobs wait for workers as they always did. Only a
service with workers, none of which can judge a submission, refuses it (`missing`): the embedded CPU default
answers a CUDA candidate at once, naming the GPU it lacks, instead of queueing a job no worker will claim.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass

from sqlalchemy import ColumnElement, false, or_, select, true
from sqlalchemy.orm import Session

from sandbox.shared.languages import LANGUAGES
from sandbox.needs import GPU, Capabilities, Needs
from sandbox.needs import needs as needs_of
from service.db.models import Job, WorkerRow, utcnow

SEEN_WITHIN_S = 600.0
"""A worker seen this recently counts towards what the service can judge: longer than a restart or a slow
heartbeat, short enough that a GPU worker taken away stops promising GPU verdicts within minutes."""


def job_needs(text: str) -> dict[str, object]:
    """A job's columns that say what judging its text needs (sandbox/needs.py): for a new job's row."""
    found = needs_of(text)
    return {"needs_gpu": found.gpu, "language": found.language}


def claimable(capabilities: Capabilities | None) -> ColumnElement[bool]:
    """The jobs a worker with `capabilities` may claim (None: a worker that does not say, which claims all)."""
    if capabilities is None:
        return true()
    gpu = true() if capabilities.gpu else Job.needs_gpu.is_(false())
    languages = Job.language.in_(list(capabilities.languages)) if capabilities.languages else false()
    return gpu & or_(Job.language.is_(None), languages)


@dataclass(frozen=True)
class Fleet:
    """What the workers seen lately can judge, each as it said (`workers.judges`)."""

    workers: list[Capabilities]

    def words(self) -> list[str]:
        """Everything some worker can judge, "gpu" first."""
        words = {word for worker in self.workers for word in worker.words()}
        return sorted(words, key=lambda w: (w != GPU, w))

    def missing(self, needs: Needs) -> list[str]:
        """What no worker of the fleet offers for a candidate with `needs`: [] when one of them can judge it, or
        when no worker was seen lately (nothing is known, so the job waits for workers)."""
        if not self.workers:
            return []
        lacks = [worker.missing(needs) for worker in self.workers]
        return [] if any(not lack for lack in lacks) else min(lacks, key=len)

    def statement(self) -> str:
        """What this service can judge, in a sentence or two, and where a GPU worker would come from."""
        if not self.workers:
            return ("No worker has been seen in the last 10 minutes: submissions wait in the queue until one "
                    "connects (`kernel-judge worker`). What it can judge depends on that worker's host.")
        if any(worker.gpu for worker in self.workers):
            return (f"This service judges on GPU workers: {_gpu_languages(self)}, at each task's official size "
                    "(GET /v1/judging lists every worker's languages).")
        return ("This service has no GPU worker: it judges C++ kernels for the CPU (torch.utils.cpp_extension."
                "load_inline with cpp_sources only) at each task's small CPU size. A CUDA, Triton, CuTe DSL or "
                "TileLang candidate is refused at submission (422, naming the GPU it needs) rather than given a "
                "verdict this host would cause. A GPU worker is `kernel-judge worker` on a host with a GPU, "
                "against this service's database: docs/gpu-workers.md.")


def _gpu_languages(fleet: Fleet) -> str:
    """The kernel languages the GPU workers judge, in words."""
    ids = {lang for worker in fleet.workers if worker.gpu for lang in worker.languages}
    return ", ".join(language.name for language in LANGUAGES if language.id in ids) or "PyTorch operators only"


def fleet(session: Session, now: dt.datetime | None = None, seen_within_s: float = SEEN_WITHIN_S) -> Fleet:
    """The capabilities of the workers seen within `seen_within_s`; a row without them (an older worker) says
    nothing and is left out."""
    since = (now or utcnow()) - dt.timedelta(seconds=seen_within_s)
    rows = session.scalars(select(WorkerRow.judges).where(WorkerRow.last_seen_at >= since)).all()
    return Fleet([Capabilities(gpu=GPU in words, languages=tuple(w for w in words if w != GPU))
                  for words in rows if words is not None])


def refusal(missing: list[str]) -> str:
    """The 422's detail for a submission no worker can judge."""
    what = " and ".join("a GPU" if word == GPU else f"the kernel language {word!r}" for word in missing)
    return (f"this service cannot judge this candidate: it needs {what}, and none of its workers has "
            f"{'it' if len(missing) == 1 else 'them'} (GET /v1/judging says what it judges). Submit it to a service "
            "with a GPU worker (docs/gpu-workers.md says where one comes from), or send a C++ kernel for the CPU "
            "(torch.utils.cpp_extension.load_inline with cpp_sources only).")
