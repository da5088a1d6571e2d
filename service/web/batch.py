"""GET /batches/{id}: a batch's progress and its summary metrics (fast_p, pass@k), from service.batches.

The numbers come from the same functions as GET /v1/batches/{id} and /metrics (service.batches.store and
service.batches.metrics); this module only lays them out. While the batch runs the page reloads itself
every 10 s (a meta refresh: works with or without JavaScript).
"""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse

from service.api.deps import ReadSessionDep
from service.batches import store
from service.batches.metrics import batch_metrics
from service.db.models import Batch
from service.web import plots
from service.web.render import page

router = APIRouter(include_in_schema=False)


@router.get("/batches/{batch_id}", response_class=HTMLResponse)
def batch_page(request: Request, batch_id: str, session: ReadSessionDep) -> HTMLResponse:
    batch = session.get(Batch, batch_id) if len(batch_id) <= 64 else None
    if batch is None:
        return page(request, "not_found.html", status_code=404, what=f"batch {batch_id!r}")
    view = store.batch_view(session, batch, with_metrics=False)
    metrics = batch_metrics(store.outcomes(session, batch_id))
    overall = metrics["overall"]
    fast = {b: plots.bars([(f"p={p}", v) for p, v in overall["fast_p"][b].items()], f"fast_p vs {b}")
            for b in overall["fast_p"]}
    pass_k = plots.bars([(f"k={k}", v) for k, v in overall["pass_at_k"].items()], "pass@k", "pass@k")
    return page(request, "batch.html", batch=view, overall=overall, groups=metrics["by_task_model"],
                fast_plots=fast, pass_plot=pass_k)
