"""GET /v1/leaderboard/{task}: the best correct submission per submitter or model, per GPU model."""

from __future__ import annotations

from typing import Annotated, Literal

from fastapi import APIRouter, Query
from fastapi.concurrency import run_in_threadpool

from service import crud
from service.api import schemas
from service.api.deps import DatabaseDep, TaskDep

router = APIRouter(prefix="/v1/leaderboard", tags=["leaderboard"])


@router.get("/{task_id}", response_model=schemas.Leaderboard, summary="Leaderboard of one task",
            responses={404: {"description": "Unknown task; the body lists the valid task ids."}})
async def read_leaderboard(
    task: TaskDep,
    db: DatabaseDep,
    by: Annotated[Literal["submitter", "model"], Query(description="One entry per submitter or per model.")] = "submitter",
    sort: Annotated[Literal["speedup_eager", "speedup_compile", "speed_of_light", "median_ms"],
                    Query(description="Ranking metric; speedups and speed-of-light rank high first, median_ms low first.")
                    ] = "speedup_eager",
    device: Annotated[str | None, Query(description="Only this device model, e.g. `NVIDIA H100 80GB HBM3`.")] = None,
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
) -> schemas.Leaderboard:
    """Only `correct` verdicts that were timed are ranked. Within a device model each submitter (or model) appears
    once, with its best submission by `sort`; ties go to the earlier submission."""
    return await run_in_threadpool(crud.leaderboard, db, task.id.value, by, sort, device, limit)
