"""GET /v1/judging: what this service can judge now, and where a GPU worker would come from (anonymous)."""

from __future__ import annotations

from fastapi import APIRouter
from pydantic import BaseModel, Field

from service.api.deps import ReadSessionDep
from service.api.errors import responses
from service.queue import capability
from service.queue.capability import GPU

router = APIRouter(prefix="/v1/judging", tags=["tasks"])


class JudgingOut(BaseModel):
    gpu: bool = Field(description="Some worker seen lately has a GPU: CUDA, Triton, CuTe DSL and TileLang "
                                  "candidates are judged (on it alone).")
    judges: list[str] = Field(description='Everything some worker can judge: "gpu" and kernel language ids.')
    workers: int = Field(description=f"Workers seen in the last {capability.SEEN_WITHIN_S:.0f} s that say what "
                                     "they judge.")
    statement: str = Field(description="The same, in words.")
    gpu_workers: str = Field(description="Where a GPU worker comes from.")


@router.get("", response_model=JudgingOut, summary="What this service can judge", responses=responses(503))
def read_judging(session: ReadSessionDep) -> JudgingOut:
    """What the workers seen lately can judge (service/queue/capability.py). A submission none of them can judge
    is refused with a 422 that names what is missing; with no worker seen at all, submissions wait for one."""
    fleet = capability.fleet(session)
    words = fleet.words()
    return JudgingOut(gpu=GPU in words, judges=words, workers=len(fleet.workers), statement=fleet.statement(),
                      gpu_workers="docs/gpu-workers.md")
