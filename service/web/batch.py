"""GET /batches/{id}: a batch's progress, its metrics in words, and its samples to drill into.

The numbers come from the same functions as GET /v1/batches/{id} and /metrics (service.batches.store and
service.batches.metrics); the sample table from service/web/samples.py. `?status=` filters the samples by
outcome (a verdict status, `pending` or `cancelled`) and `?page=` pages them, as plain links: the page works
without JavaScript. While the batch runs the page reloads itself every 10 s (a meta refresh).
"""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query, Request
from fastapi.responses import HTMLResponse

from service.api.deps import ReadSessionDep
from service.batches import store
from service.batches.metrics import batch_metrics
from service.db.models import Batch
from service.web import plots, samples
from service.web.render import BASELINES, page

router = APIRouter(include_in_schema=False)


def _threshold(p: str) -> str:
    return "correct" if float(p) == 0 else f"> {p}×"


@router.get("/batches/{batch_id}", response_class=HTMLResponse)
def batch_page(
    request: Request,
    batch_id: str,
    session: ReadSessionDep,
    status: Annotated[str | None, Query(max_length=32)] = None,
    page_no: Annotated[int, Query(alias="page", ge=1, le=100_000)] = 1,
) -> HTMLResponse:
    batch = session.get(Batch, batch_id) if len(batch_id) <= 64 else None
    if batch is None:
        return page(request, "not_found.html", status_code=404, what=f"batch {batch_id!r}")
    status = status or None
    if status is not None and status not in samples.OUTCOMES:
        return page(request, "not_found.html", status_code=404,
                    what=f"sample outcome {status!r} (one of: {', '.join(samples.OUTCOMES)})")
    view = store.batch_view(session, batch, with_metrics=False)
    metrics = batch_metrics(store.outcomes(session, batch_id))
    overall = metrics["overall"]
    fast = {b: plots.bars([(_threshold(p), v) for p, v in overall["fast_p"][b].items()], f"fast_p vs {BASELINES[b]}",
                          "share of judged samples",
                          f"correct, and faster than {BASELINES[b]} by more than the threshold")
            for b in overall["fast_p"]}
    pass_k = plots.bars([(f"k = {k}", v) for k, v in overall["pass_at_k"].items()], "pass@k",
                        "pass@k", "k: samples drawn per prompt (task, model)")
    counts = samples.outcome_counts(session, batch_id)
    shown = counts.get(status, 0) if status else sum(counts.values())
    return page(request, "batch.html", batch=view, overall=overall, groups=metrics["by_task_model"],
                fast_plots=fast, pass_plot=pass_k, outcomes=counts, status=status, page_no=page_no,
                page_size=samples.PAGE_SIZE, shown=shown, rows=samples.page(session, batch_id, status, page_no),
                correct_kernels=samples.correct_kernels(session, batch_id),
                measured=samples.measured(session, batch_id), cancelled=samples.cancellation(session, batch))
