"""Page routes: `/`, `/leaderboard/{task}`, `/submissions/{id}` (and `/batches/{id}`, in service/web/batch.py).

Routes stay thin: read through service.ranking and service.crud in the request's read-only session, then
render a template. The pages use the same query parameters as the JSON routes, as plain GET forms. A
submission's page shows its source, its verdict's diagnostics and its profile only where service/visibility.py
lets anyone read them (the status and figures always): the pages have no login, so every visitor is anonymous
there.
"""

from __future__ import annotations

import datetime as dt
import json
import logging
from collections.abc import Iterable
from pathlib import Path
from typing import Annotated

from fastapi import APIRouter, FastAPI, Query, Request
from fastapi.responses import HTMLResponse
from fastapi.staticfiles import StaticFiles

from reference import UnknownTask, all_tasks, get_task
from sandbox.profiling.report import Profile
from service import crud, ranking, visibility
from service.rankable import Rankable
from service.api.deps import ReadSessionDep, SettingsDep
from service.db.models import Submission
from service.profiles import store as profile_store
from service.queue import capability
from service.web import batch, measured, plots
from service.web.disconnect import ClientGone
from service.web.highlight import Abandoned, source_html
from service.web.render import BASELINES, baseline_order, page

log = logging.getLogger(__name__)

STATIC = Path(__file__).resolve().parent / "static"
PAGE_SIZE = 50
"""Ranked entries per page and GPU model."""
CLIENT_GONE = 499
"""The status of a page abandoned because its client left (nginx's "client closed request"): nobody reads it, but
the access log says why the view ended."""

router = APIRouter(include_in_schema=False)
router.include_router(batch.router)  # /batches/{id}


def mount_static(app: FastAPI) -> None:
    app.mount("/static", StaticFiles(directory=STATIC), name="static")


def not_found(request: Request, what: str) -> HTMLResponse:
    return page(request, "not_found.html", status_code=404, what=what)


def correct_counts(rows: Iterable[Rankable], device: str) -> tuple[int, int]:
    """(correct timed verdicts, distinct kernels among them) on a device model: one code sent three times is
    three correct submissions and one kernel (the key is the sha256 of the code judged, as in the ranking)."""
    codes = [r.source for r in rows if r.device_name == device]
    return len(codes), len(set(codes))


@router.get("/", response_class=HTMLResponse)
def home(request: Request, session: ReadSessionDep) -> HTMLResponse:
    cache, version = ranking.cache_for(request.app.state), ranking.Cache.version(session)
    tasks = []
    for task in all_tasks():
        summaries = ranking.summaries(session, task.id.value, cache, version)
        rows = cache.pools.get(task.id.value).snapshot.rows  # refreshed by `summaries` a moment ago
        newest = ranking.cached(cache, ("newest measured", task.id.value), version,
                                lambda task_id=task.id.value: measured.newest_per_device(session, task_id))
        devices = [(d, correct_counts(rows, d.device_name), newest.get(d.device_name)) for d in summaries]
        tasks.append((task, devices, any(where is not None and where.on_cpu for *_, where in devices)))
    return page(request, "index.html", tasks=tasks, judging=capability.fleet(session).statement())


@router.get("/leaderboard/{task_id}", response_class=HTMLResponse)
def leaderboard(
    request: Request,
    task_id: str,
    session: ReadSessionDep,
    by: ranking.By = "submitter",
    sort: ranking.Sort = "speedup_eager",
    device: Annotated[str | None, Query(max_length=200)] = None,
    extra_failures: bool = False,
    page_no: Annotated[int, Query(alias="page", ge=1, le=100_000)] = 1,
) -> HTMLResponse:
    try:
        task = get_task(task_id)
    except UnknownTask:
        return not_found(request, f"task {task_id!r}")
    query = ranking.Query(task=task.id.value, by=by, sort=sort, device=device or None, extra_failures=extra_failures,
                          offset=(page_no - 1) * PAGE_SIZE, limit=PAGE_SIZE)
    cache, version = ranking.cache_for(request.app.state), ranking.Cache.version(session)
    board = ranking.leaderboard(session, query, cache, version)
    rankable = cache.pools.get(task.id.value).snapshot  # refreshed by `leaderboard` a moment ago
    now = dt.datetime.now(dt.timezone.utc)

    def device_figures(device: str) -> tuple:
        return (plots.speedup_histogram(ranking.speedups(rankable.rows, device)),
                ranking.record_times(rankable, device))

    # What each board's numbers were measured at, from the verdicts of the entries it shows.
    shown = [e.submission_id for d in board.devices for e in (*d.entries, *d.unranked)]
    by_id = ranking.cached(cache, ("measured", task.id.value, tuple(shown)), rankable.version,
                           lambda: measured.of_submissions(session, shown))
    boards_measured = {d.device_name: measured.distinct(by_id[e.submission_id] for e in (*d.entries, *d.unranked)
                                                        if e.submission_id in by_id) for d in board.devices}
    counts = {d.device_name: correct_counts(rankable.rows, d.device_name) for d in board.devices}
    figures = {}
    for d in board.devices:
        histogram, records = ranking.cached(cache, ("figures", task.id.value, d.device_name), rankable.version,
                                            lambda name=d.device_name: device_figures(name))
        figures[d.device_name] = (histogram, plots.best_over_time(records, now))
    devices = ranking.cached(cache, ("devices", task.id.value), version,
                             lambda: ranking.devices_seen(session, task.id.value))
    # For the pagination links: the same filters, empty ones left out.
    chosen = (("by", by), ("sort", sort), ("device", device), ("extra_failures", extra_failures and "true"))
    params = {k: v for k, v in chosen if v}
    return page(request, "leaderboard.html", task=task, board=board, query=query, page_no=page_no, params=params,
                page_size=PAGE_SIZE, devices=devices, figures=figures, measured=by_id,
                boards_measured=boards_measured, counts=counts,
                tasks=all_tasks(), ranked_isolation=ranking.RANKED_ISOLATION)


def _timing_plot(verdict) -> object:  # noqa: ANN001
    perf = verdict.performance if verdict else None
    if perf is None:
        return None
    rows = [("this kernel", perf.candidate)] + [(BASELINES.get(n, n), s) for n, s in baseline_order(perf.baselines)]
    return plots.timing_boxes([(name, s.min_ms, s.q25_ms, s.median_ms, s.q75_ms) for name, s in rows])


@router.get("/submissions/{submission_id}", response_class=HTMLResponse)
def submission(request: Request, submission_id: str, session: ReadSessionDep, settings: SettingsDep) -> HTMLResponse:
    public_after = settings.sources_public_after
    view = crud.submission_view(session, submission_id, public_after) if len(submission_id) <= 64 else None
    if view is None:
        return not_found(request, f"submission {submission_id!r}")
    row = session.get(Submission, submission_id)
    # The pages have no login: every visitor is anonymous, and sees the source only where anyone may.
    access = visibility.source_access(row, visibility.ANONYMOUS, public_after)
    source = row.source if access is not visibility.SourceAccess.PRIVATE else None
    verdict = view.verdict
    failed = next((t for t in verdict.trials if not t.passed), None) if verdict else None
    found = profile_store.for_submission(session, submission_id) if not view.diagnostics_withheld else None
    profile_row = found[1] if found else None  # a profile names the source's kernels: withheld with it
    profile_data = Profile(**profile_row.profile) if profile_row is not None and profile_row.profile else None
    try:  # the expensive step (issue 41): stopped when the visitor hangs up
        html = None if source is None else source_html(source, cpu_s=settings.highlight_cpu_s,
                                                       gone=ClientGone(request))
    except Abandoned:
        log.info("submission page %s: the client left; its rendering was stopped", submission_id)
        return HTMLResponse("", status_code=CLIENT_GONE)
    return page(request, "submission.html", sub=view, verdict=verdict, failed_trial=failed, headers=view.shared_headers,
                profile=profile_row, profile_data=profile_data,
                profile_kernels=sorted(profile_data.kernels, key=lambda k: -(k.duration_ns or 0.0))
                if profile_data else [],
                source=html,
                source_lines=len(source.splitlines()) if source is not None else 0,
                access=access.value, public_after=public_after,
                publish_on=public_after if public_after is not None and row.created_at < public_after else None,
                timing=_timing_plot(verdict),
                where=measured.of_verdict(verdict) if verdict and verdict.performance else None,
                batch_id=row.batch_id, batch_line=row.line,
                details=json.dumps(verdict.details, indent=2, sort_keys=True) if verdict and verdict.details else "",
                sampling=json.dumps(view.sampling, sort_keys=True) if view.sampling else "",
                ranked=ranking.is_ranked_isolation(verdict.environment.isolation)
                if verdict and verdict.environment else False)
