"""GET /v1/leaderboard/{task}: ranked entries per GPU model (the rules are in service/ranking.py)."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query, Request

from service import ranking
from service.api.deps import ReadSessionDep, SettingsDep, TaskDep

router = APIRouter(prefix="/v1/leaderboard", tags=["leaderboard"])


@router.get("/{task_id}", response_model=ranking.Leaderboard, summary="Leaderboard of one task",
            responses={404: {"description": "Unknown task; the body lists the valid task ids."}})
def read_leaderboard(
    request: Request,
    task: TaskDep,
    session: ReadSessionDep,
    settings: SettingsDep,
    by: Annotated[ranking.By, Query(description="One entry per submitter, per model, or per distinct code.")
                  ] = "submitter",
    sort: Annotated[ranking.Sort, Query(description="Ranking metric; speedups and speed-of-light rank high first, "
                                                    "median_ms low first.")] = "speedup_eager",
    device: Annotated[str | None, Query(max_length=200,
                                        description="Only this GPU model, e.g. `NVIDIA H100 80GB HBM3`.")] = None,
    extra_failures: Annotated[bool, Query(description="Also rank kernels that failed one of the task's extra "
                                                      "shapes.")] = False,
    offset: Annotated[int, Query(ge=0, le=1_000_000)] = 0,
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
) -> ranking.Leaderboard:
    """Only `correct`, timed verdicts judged under bubblewrap and not marked unranked by the judge (a card
    throttled during both timings) are ranked (others are listed in `unranked`).
    Each distinct code (sha256 of the code judged) counts once per GPU model, with its first verdict; then
    each submitter (or model) appears once, with its best code by `sort`. Entries whose interquartile ranges
    overlap the head of their group share its rank (`tied`, `rank_label` "=2"). The head of the default view is what
    "best" means everywhere (the home page's fastest kernel, `kernel-judge leaderboard`). `source_sha256` is given
    only for code anyone may read."""
    board = ranking.leaderboard(session, ranking.Query(task=task.id.value, by=by, sort=sort, device=device,
                                                       extra_failures=extra_failures, offset=offset, limit=limit),
                                ranking.cache_for(request.app.state))
    return ranking.without_private_digests(session, board, settings.sources_public_after)
