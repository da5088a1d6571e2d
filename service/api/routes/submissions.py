"""POST /v1/submissions, GET /v1/submissions/{id}, GET /v1/submissions/{id}/events (server-sent events)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from typing import Annotated

from fastapi import APIRouter, Header, HTTPException, Request, Response, status
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import StreamingResponse
from pydantic import ValidationError

from reference import UnknownTask, get_task
from service import crud
from service.api import schemas
from service.api.deps import CurrentKey, DatabaseDep, ReadSessionDep, SettingsDep, unknown_task
from service.core.ratelimit import take_token
from service.db.session import Database
from service.queue.states import PublicStatus

router = APIRouter(prefix="/v1/submissions", tags=["submissions"])

TEXT_TYPES = ("text/", "application/octet-stream")

_REQUEST_BODY = {
    "required": True,
    "content": {
        "application/json": {"schema": schemas.SubmissionCreate.model_json_schema()},
        "text/plain": {"schema": {"type": "string", "description":
                                  "The candidate as the raw body (UTF-8); task and metadata as query parameters."}},
    },
}


def _too_large(what: str, size: int | None, limit: int, setting: str) -> HTTPException:
    got = f" ({size} bytes)" if size is not None else ""
    return HTTPException(status.HTTP_413_CONTENT_TOO_LARGE,
                         {"message": f"{what} is too large{got}; the limit is {limit} bytes ({setting})",
                          "limit_bytes": limit})


def _invalid(message: str, errors: list | None = None) -> HTTPException:
    return HTTPException(status.HTTP_422_UNPROCESSABLE_CONTENT, {"message": message, "errors": errors or []})


async def _read_body(request: Request, limit: int) -> bytes:
    declared = request.headers.get("content-length")
    if declared and declared.isdigit() and int(declared) > limit:
        raise _too_large("the request body", int(declared), limit, "JUDGE_MAX_REQUEST_BYTES")
    size, chunks = 0, []
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise _too_large("the request body", None, limit, "JUDGE_MAX_REQUEST_BYTES")
        chunks.append(chunk)
    return b"".join(chunks)


def _parse(request: Request, body: bytes) -> schemas.SubmissionCreate:
    content_type = request.headers.get("content-type", "application/json").split(";")[0].strip().lower()
    if content_type.startswith(TEXT_TYPES):
        try:
            source = body.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise _invalid(f"the source is not valid UTF-8: byte {body[exc.start]:#04x} at offset {exc.start}") from None
        params = request.query_params
        if not params.get("task"):
            raise _invalid("with a text body, the task goes in the query string: ?task=kl_div")
        fields = {"task": params["task"], "source": source, "model": params.get("model"),
                  "tags": params.getlist("tag"), "idempotency_key": params.get("idempotency_key")}
        if params.get("sample_index") is not None:
            fields["sample_index"] = params["sample_index"]
        try:
            return schemas.SubmissionCreate.model_validate(fields)
        except ValidationError as exc:
            raise _invalid("invalid submission", exc.errors(include_url=False, include_context=False)) from None
    if content_type != "application/json":
        raise HTTPException(status.HTTP_415_UNSUPPORTED_MEDIA_TYPE,
                            "send application/json (SubmissionCreate) or text/plain (the source)")
    try:
        body.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise _invalid(f"the request body is not valid UTF-8: byte {body[exc.start]:#04x} at offset {exc.start}") from None
    try:
        return schemas.SubmissionCreate.model_validate_json(body)
    except ValidationError as exc:
        errors = exc.errors(include_url=False, include_context=False, include_input=False)
        raise _invalid("invalid submission body", errors) from None


def _validate(body: schemas.SubmissionCreate, settings: SettingsDep) -> None:
    try:
        encoded = body.source.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise _invalid(f"the source is not valid UTF-8 (unpaired surrogate at character {exc.start})") from None
    if len(encoded) > settings.max_source_bytes:
        raise _too_large("the source", len(encoded), settings.max_source_bytes, "JUDGE_MAX_SOURCE_BYTES")
    if not body.source.strip():
        raise _invalid("the source is empty")
    try:
        get_task(body.task)
    except UnknownTask:
        raise unknown_task(body.task) from None


def _accepted(response: Response, request: Request, sub_id: str, status_: PublicStatus,
              duplicate: bool) -> schemas.SubmissionAccepted:
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
    openapi_extra={"requestBody": _REQUEST_BODY},
    responses={
        401: {"description": "No or unknown API key."},
        404: {"description": "Unknown task; the body lists the valid task ids."},
        409: {"description": "The idempotency key was used for a different task or source."},
        413: {"description": "Source larger than JUDGE_MAX_SOURCE_BYTES (default 256 KiB)."},
        422: {"description": "Empty source, source not UTF-8, or a malformed body."},
        429: {"description": "Rate limit or queue quota exceeded; see Retry-After."},
    },
)
async def create_submission(request: Request, response: Response, key: CurrentKey, db: DatabaseDep,
                            settings: SettingsDep,
                            idempotency_key: Annotated[str | None, Header(max_length=200)] = None,
                            ) -> schemas.SubmissionAccepted:
    """Queue a candidate for judging and return at once (202). The submission and its job are written in one
    transaction, so the candidate is durable when this returns. Send JSON (`SubmissionCreate`), or the source
    itself as `text/plain` with `?task=...` (and optionally `model`, `sample_index`, `tag`) in the query.
    Resending with the same idempotency key returns the first submission (`duplicate: true`)."""
    body = _parse(request, await _read_body(request, settings.max_request_bytes))
    if idempotency_key and not body.idempotency_key:
        body.idempotency_key = idempotency_key
    _validate(body, settings)
    created = await run_in_threadpool(_admit, db, settings, key, body)
    sub = created.submission
    return _accepted(response, request, sub.id, PublicStatus.QUEUED if not created.duplicate else
                     _status(db, sub.id), created.duplicate)


def _admit(db: Database, settings: SettingsDep, key, body: schemas.SubmissionCreate) -> crud.Created:  # noqa: ANN001
    """Idempotent replay first (free), then queue quota, then rate limit, then insert."""
    with db.transaction(read_only=True) as session:
        existing = crud.find_idempotent(session, key.id, body.idempotency_key)
        if existing is None:
            pending = crud.unfinished_count(session, key.id)
    try:
        if existing is not None:
            return crud.check_replay(existing, body)
    except crud.IdempotencyConflict as exc:
        raise HTTPException(status.HTTP_409_CONFLICT, str(exc)) from None
    if pending >= settings.queue_quota:
        raise HTTPException(status.HTTP_429_TOO_MANY_REQUESTS,
                            f"queue quota reached: {pending} unfinished submissions (JUDGE_QUEUE_QUOTA="
                            f"{settings.queue_quota})", headers={"Retry-After": str(settings.quota_retry_after_s)})
    wait = take_token(db, key.id, settings.rate_limit_per_minute, settings.rate_limit_burst)
    if wait:
        raise HTTPException(status.HTTP_429_TOO_MANY_REQUESTS,
                            f"rate limit: {settings.rate_limit_per_minute:g} submissions per minute, bursts of "
                            f"{settings.rate_limit_burst}", headers={"Retry-After": str(int(wait))})
    try:
        return crud.create_submission(db, key, body)
    except crud.IdempotencyConflict as exc:
        raise HTTPException(status.HTTP_409_CONFLICT, str(exc)) from None


def _status(db: Database, sub_id: str) -> PublicStatus:
    with db.transaction(read_only=True) as session:
        view = crud.submission_view(session, sub_id)
    return view.status


def _not_found(sub_id: str) -> HTTPException:
    return HTTPException(status.HTTP_404_NOT_FOUND, f"no submission {sub_id!r}")


@router.get("/{submission_id}", response_model=schemas.SubmissionOut, summary="Status and verdict of a submission")
def read_submission(submission_id: str, session: ReadSessionDep) -> schemas.SubmissionOut:
    """Status (`queued`, `compiling`, `running`, `done`), the time each stage began, the position in the queue
    while queued, and the full verdict once done. Anyone with the id may read it."""
    view = crud.submission_view(session, submission_id)
    if view is None:
        raise _not_found(submission_id)
    return view


def _sse(event: str, data: str) -> str:
    return f"event: {event}\ndata: {data}\n\n"


@router.get(
    "/{submission_id}/events",
    summary="Server-sent events of a submission's status changes",
    response_class=StreamingResponse,
    responses={200: {"content": {"text/event-stream": {}}, "description":
                     "`event: status` with the SubmissionOut JSON at every change; the last one has status `done` "
                     "and the verdict, then the stream ends."}},
)
async def submission_events(submission_id: str, db: DatabaseDep, settings: SettingsDep,
                            request: Request) -> StreamingResponse:
    def load() -> schemas.SubmissionOut | None:
        with db.transaction(read_only=True) as session:
            return crud.submission_view(session, submission_id)

    first = await run_in_threadpool(load)
    if first is None:
        raise _not_found(submission_id)

    async def stream() -> AsyncIterator[str]:
        view, last, deadline, quiet = first, None, time.monotonic() + settings.sse_max_s, time.monotonic()
        yield "retry: 2000\n\n"
        while True:
            key = (view.stage, view.position)
            if key != last:
                last, quiet = key, time.monotonic()
                yield _sse("status", view.model_dump_json())
            if view.status is PublicStatus.DONE or time.monotonic() > deadline or await request.is_disconnected():
                return
            if time.monotonic() - quiet > 15:
                quiet = time.monotonic()
                yield ": keep-alive\n\n"
            await asyncio.sleep(settings.sse_poll_s)
            view = await run_in_threadpool(load)

    return StreamingResponse(stream(), media_type="text/event-stream",
                             headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"})


