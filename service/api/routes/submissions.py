"""POST /v1/submissions, GET /v1/submissions (yours, paginated), GET and PATCH /v1/submissions/{id}, its /source
(where service/visibility.py allows) and its /events (server-sent events)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable
from typing import Annotated, Any

from fastapi import APIRouter, HTTPException, Query, Request, Response, status
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import StreamingResponse

from sandbox.needs import needs
from sandbox.verdict import Status
from service import crud
from service.api import schemas
from service.api.deps import (OPTIONAL_KEY, CurrentKey, DatabaseDep, ReadSessionDep, SessionDep, SettingsDep,
                              StreamHubDep, ViewerDep)
from service.api.errors import responses
from service.api.submission_body import REQUEST_BODY, SubmissionBody
from service.api.stream_hub import Subscription, TooManyStreams
from service.core.config import Settings
from service.core.ratelimit import lock_key, spend_token
from service.db.models import ApiKey
from service.db.session import Database
from service.queue import capability
from service.queue.states import PublicStatus
from service.visibility import Viewer, can_see_source

router = APIRouter(prefix="/v1/submissions", tags=["submissions"])


def _accepted(response: Response, sub_id: str, status_: PublicStatus, duplicate: bool) -> schemas.SubmissionAccepted:
    location = f"/v1/submissions/{sub_id}"
    response.headers["Location"] = location
    if duplicate:
        response.headers["Idempotent-Replayed"] = "true"
    return schemas.SubmissionAccepted(id=sub_id, status=status_, location=location, events=f"{location}/events",
                                      duplicate=duplicate)


@router.post(
    "",
    status_code=status.HTTP_202_ACCEPTED,
    response_model=schemas.SubmissionAccepted,
    summary="Submit a candidate kernel",
    openapi_extra={"requestBody": REQUEST_BODY},
    responses=responses(401, 404, 409, 413, 415, 422, 429, 503, 507),
)
async def create_submission(response: Response, key: CurrentKey, db: DatabaseDep, settings: SettingsDep,
                            body: SubmissionBody) -> schemas.SubmissionAccepted:
    """Queue a candidate for judging and return at once (202). The submission and its job are written in one
    transaction, so the candidate is durable when this returns. Send JSON (`SubmissionCreate`), or the source
    itself as `text/plain` with `?task=...` (and optionally `model`, `sample_index`, `tag`, `public`,
    `idempotency_key`) in the query. The verdict will be public; the source is private to you unless `public` is
    true (see PATCH /v1/submissions/{id}). Resending with the same idempotency key returns the first submission
    (`duplicate: true`)."""
    created = await run_in_threadpool(_admit, db, settings, key, body)
    status_ = PublicStatus.QUEUED if not created.duplicate else await run_in_threadpool(_status, db,
                                                                                        created.submission.id)
    return _accepted(response, created.submission.id, status_, created.duplicate)


def _conflict(exc: crud.IdempotencyConflict) -> HTTPException:
    return HTTPException(status.HTTP_409_CONFLICT, str(exc))


def _admit(db: Database, settings: Settings, key: ApiKey, body: schemas.SubmissionCreate) -> crud.Created:
    """Idempotent replay first (free), then queue quota, then rate limit, then insert: the last three in one
    transaction holding the key's row, so concurrent requests of one key (in any API process) are counted,
    charged and inserted one at a time (counted in one transaction and inserted in another, 60 concurrent
    POSTs passed a quota of 10 38 times)."""
    with db.transaction(read_only=True) as session:
        existing = crud.find_idempotent(session, key.id, body.idempotency_key)
        fleet = capability.fleet(session) if existing is None else None
    missing = fleet.missing(needs(body.source)) if fleet is not None else []
    if fleet is not None and missing:
        # Refused, not queued: no worker here would claim it, so a job would wait with no end in sight, and a
        # client waiting on its verdict (submit --wait, a trainer's reward) would learn nothing until its timeout.
        raise HTTPException(status.HTTP_422_UNPROCESSABLE_ENTITY, {
            "message": capability.refusal(missing), "missing": missing,
            "judges": fleet.words()})
    try:
        if existing is not None:
            return crud.check_replay(existing, body)
        with db.transaction() as session:
            locked = lock_key(session, key.id)
            existing = crud.find_idempotent(session, key.id, body.idempotency_key)
            if existing is not None:  # a concurrent request with this key was admitted while this one waited
                return crud.check_replay(existing, body)
            pending = crud.unfinished_count(session, key.id)
            if pending >= settings.queue_quota:
                raise HTTPException(status.HTTP_429_TOO_MANY_REQUESTS,
                                    f"queue quota reached: {pending} unfinished submissions (JUDGE_QUEUE_QUOTA="
                                    f"{settings.queue_quota}); wait for some to finish",
                                    headers={"Retry-After": str(settings.quota_retry_after_s)})
            wait = spend_token(session, locked, settings.rate_limit_per_minute, settings.rate_limit_burst)
            if wait:
                raise HTTPException(status.HTTP_429_TOO_MANY_REQUESTS,
                                    f"rate limit: {settings.rate_limit_per_minute:g} submissions per minute, bursts "
                                    f"of {settings.rate_limit_burst}", headers={"Retry-After": str(int(wait))})
            return crud.create_submission(session, key, body)
    except crud.IdempotencyConflict as exc:
        raise _conflict(exc) from None


def _status(db: Database, sub_id: str) -> PublicStatus:
    with db.transaction(read_only=True) as session:
        view = crud.submission_view(session, sub_id)
    return view.status


def _not_found(sub_id: str) -> HTTPException:
    return HTTPException(status.HTTP_404_NOT_FOUND, f"no submission {sub_id!r}")


@router.get("", response_model=schemas.SubmissionPage, summary="List your submissions",
            responses=responses(401, 404, 422, 503))
def list_submissions(
    key: CurrentKey,
    session: ReadSessionDep,
    task: Annotated[str | None, Query(description="Only this task.")] = None,
    status_: Annotated[PublicStatus | None, Query(alias="status", description="Only in this status.")] = None,
    verdict: Annotated[Status | None, Query(description="Only with this verdict.")] = None,
    model: Annotated[str | None, Query(description="Only from this model.")] = None,
    tag: Annotated[str | None, Query(description="Only with this tag.")] = None,
    batch: Annotated[str | None, Query(description="Only from this batch.")] = None,
    limit: Annotated[int, Query(ge=1, le=500, description="Page size.")] = 50,
    cursor: Annotated[str | None, Query(description="`next_cursor` of the previous page (the id of its last "
                                                    "submission); 404 if it is not one of yours.")] = None,
) -> schemas.SubmissionPage:
    """The submissions made under your submitter name (by any of your keys), newest first, one page at a time.
    Pages follow a cursor, so new submissions arriving meanwhile neither repeat nor skip entries."""
    filters = crud.SubmissionFilter(task=task, status=status_, verdict=verdict, model=model, tag=tag, batch=batch)
    try:
        items, after = crud.list_submissions(session, key.submitter, filters, limit, cursor)
    except crud.UnknownCursor:
        raise HTTPException(status.HTTP_404_NOT_FOUND, {
            "message": f"cursor {cursor!r} is not one of your submissions: pass the previous page's next_cursor",
            "errors": [{"loc": ("query", "cursor"), "msg": "unknown cursor"}]}) from None
    return schemas.SubmissionPage(items=items, next_cursor=after)


@router.get("/{submission_id}", response_model=schemas.SubmissionOut, summary="Status and verdict of a submission",
            openapi_extra=OPTIONAL_KEY, responses=responses(401, 404, 422, 503))
def read_submission(submission_id: str, viewer: ViewerDep, session: ReadSessionDep,
                    settings: SettingsDep) -> schemas.SubmissionOut:
    """Status (`queued`, `compiling`, `running`, `done`), the time each stage began, the position in the queue
    while queued, and the verdict once done. Anyone with the id may read its status and figures; the source is
    not part of it (`source_public` says whether anyone may read that too). What is made of the source (the
    diagnosis, compile errors, details) and the digests only where the source may be read: by its submitter's
    keys and the admin key, or by anyone once it is public (`diagnostics_withheld` says when they are left out)."""
    view = crud.submission_view(session, submission_id, settings.sources_public_after, viewer)
    if view is None:
        raise _not_found(submission_id)
    return view


@router.patch("/{submission_id}", response_model=schemas.SubmissionOut,
              summary="Make a submission's source public, or private again",
              responses=responses(401, 404, 422, 503))
def update_submission(submission_id: str, change: schemas.SubmissionUpdate, viewer: ViewerDep, session: SessionDep,
                      settings: SettingsDep) -> schemas.SubmissionOut:
    """Set `public`: whether anyone may read the source (its page, GET .../source). Only its submitter (any of
    their keys) or the admin key may; another submitter's id answers 404, like a missing one. Making it private
    again does not hide a source that JUDGE_SOURCES_PUBLIC_AFTER has published (`source_public` stays true)."""
    if viewer.anonymous:
        raise HTTPException(status.HTTP_401_UNAUTHORIZED, "an API key is required: Authorization: Bearer <key>",
                            headers={"WWW-Authenticate": "Bearer"})
    sub = crud.submission_source(session, submission_id)
    if sub is None or not (viewer.admin or viewer.submitter == sub.submitter):
        raise _not_found(submission_id)
    sub.public = change.public
    session.flush()
    view = crud.submission_view(session, submission_id, settings.sources_public_after, viewer)
    if view is None:  # a submission whose job is missing: none is written that way
        raise _not_found(submission_id)
    return view


def _prefers_text(accept: str | None) -> bool:
    """Whether an Accept header ranks text/plain above application/json (a tie, `*/*` or none: JSON)."""
    quality = {"text": 0.0, "json": 0.0}
    for item in (accept or "").split(","):
        media, *params = (part.strip() for part in item.split(";"))
        q = next((p[2:] for p in params if p.lower().startswith("q=")), "1")
        try:
            weight = float(q)
        except ValueError:
            continue
        media = media.lower()
        if media in ("text/plain", "text/*", "*/*"):
            quality["text"] = max(quality["text"], weight)
        if media in ("application/json", "application/*", "*/*"):
            quality["json"] = max(quality["json"], weight)
    return quality["text"] > quality["json"]


SOURCE_OK = {"description": "The source: as JSON (SubmissionSource) by default, or the text itself to "
                            "`Accept: text/plain` (UTF-8), to save it as a file.",
             "content": {"text/plain": {"schema": {"type": "string"}}}}


@router.get("/{submission_id}/source", response_model=schemas.SubmissionSource,
            summary="The source of a submission, where you may read it", openapi_extra=OPTIONAL_KEY,
            responses={200: SOURCE_OK, **responses(401, 404, 422, 503)})
def read_source(submission_id: str, viewer: ViewerDep, session: ReadSessionDep, settings: SettingsDep,
                request: Request, response: Response) -> schemas.SubmissionSource | Response:
    """Exactly what was submitted (for a raw LLM completion: the whole completion). The verdict is public, the
    kernel is not: its submitter (any of their keys) and the admin key may read it; anyone may, without a key,
    once it is public (sent with `public: true` or made so with PATCH) or published by JUDGE_SOURCES_PUBLIC_AFTER.
    A private source answers 401 without a key and 404 to another submitter's key, like a missing one.
    JSON by default; the text alone (`text/plain; charset=utf-8`) when Accept prefers text/plain."""
    sub = crud.submission_source(session, submission_id)
    if sub is None:
        raise _not_found(submission_id)
    if not can_see_source(sub, viewer, settings.sources_public_after):
        if viewer.anonymous:
            raise HTTPException(status.HTTP_401_UNAUTHORIZED,
                                f"the source of submission {submission_id!r} is private: send its submitter's key "
                                "(Authorization: Bearer <key>)", headers={"WWW-Authenticate": "Bearer"})
        raise _not_found(submission_id)
    if _prefers_text(request.headers.get("accept")):
        return Response(sub.source, media_type="text/plain; charset=utf-8", headers={"Vary": "Accept"})
    response.headers["Vary"] = "Accept"
    return schemas.SubmissionSource(id=sub.id, task=sub.task_id, source=sub.source,
                                    text_sha256=sub.text_sha256, source_sha256=sub.text_sha256)


KEEP_ALIVE_S = 15.0
"""A comment line this often on a quiet stream, so proxies keep it and a vanished client is noticed."""


def _sse(event: str, data: str) -> str:
    return f"event: {event}\ndata: {data}\n\n"


@router.get(
    "/{submission_id}/events",
    summary="Server-sent events of a submission's status changes",
    response_class=StreamingResponse, openapi_extra=OPTIONAL_KEY,
    responses={**responses(401, 404, 422, 429, 503), 200: {"content": {"text/event-stream": {}}, "description":
                     "`event: status` with the SubmissionOut JSON at every change; the last one has status `done` "
                     "and the verdict, then the stream ends."}},
)
async def submission_events(submission_id: str, db: DatabaseDep, settings: SettingsDep, hub: StreamHubDep,
                            viewer: ViewerDep, request: Request) -> StreamingResponse:
    """Readable without a key. Every open stream of one API process is watched by one task
    (service/api/stream_hub.py); a caller may hold `sse_max_streams_per_key` open at once (per key, or per
    client address without one), and one more answers 429."""
    owner = _stream_owner(viewer, request)
    try:
        release = hub.reserve(owner, settings.sse_max_streams_per_key)
    except TooManyStreams as too_many:
        raise HTTPException(
            status.HTTP_429_TOO_MANY_REQUESTS,
            f"{too_many.limit} event streams are already open for this caller, the most allowed "
            "(JUDGE_SSE_MAX_STREAMS_PER_KEY): close one by ending its HTTP connection (a stream also ends by "
            "itself at its verdict), or follow submissions with GET /v1/submissions/{id} or their batch",
            headers={"Retry-After": "5"}) from None
    try:
        first = await run_in_threadpool(_load_view, db, submission_id, settings, viewer)
    except BaseException:
        release()
        raise
    if first is None:
        release()
        raise _not_found(submission_id)
    sub = hub.subscribe(first, viewer)

    def close() -> None:
        hub.unsubscribe(sub)
        release()
    return _ClosingStream(_stream(first, sub, close, settings.sse_max_s), close, media_type="text/event-stream",
                          headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"})


class _ClosingStream(StreamingResponse):
    """A stream that runs `on_close` however it ends. When the client leaves, Starlette cancels the response
    while it may wait in `send`, with the generator suspended at a yield whose `finally` would run only when
    the generator is collected: the subscription and the caller's place in the count must end now."""

    def __init__(self, content: AsyncIterator[str], on_close: Callable[[], None], **kwargs: Any) -> None:
        super().__init__(content, **kwargs)
        self._on_close = on_close

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            self._on_close()


def _stream_owner(viewer: Viewer, request: Request) -> str:
    if viewer.admin:
        return "admin"
    if viewer.submitter is not None:
        return f"submitter:{viewer.submitter}"
    return f"address:{request.client.host if request.client else '?'}"


def _load_view(db: Database, submission_id: str, settings: Settings,
               viewer: Viewer) -> schemas.SubmissionOut | None:
    with db.transaction(read_only=True) as session:
        return crud.submission_view(session, submission_id, settings.sources_public_after, viewer)


async def _stream(first: schemas.SubmissionOut, sub: Subscription, close: Callable[[], None],
                  max_s: float) -> AsyncIterator[str]:
    """The stream's lines, until the verdict or `max_s`; `close` ends the subscription (also run by
    _ClosingStream when the client leaves first)."""
    try:
        view, last, deadline = first, None, time.monotonic() + max_s
        yield "retry: 2000\n\n"
        while True:
            shown = (view.stage, view.position)
            if shown != last:
                last = shown
                yield _sse("status", view.model_dump_json())
            left = deadline - time.monotonic()
            if view.status in (PublicStatus.DONE, PublicStatus.CANCELLED) or left <= 0:
                return
            try:
                view = await asyncio.wait_for(sub.views.get(), min(KEEP_ALIVE_S, left))
            except TimeoutError:
                yield ": keep-alive\n\n"
    finally:
        close()
