"""POST /v1/batches, GET /v1/batches[/{id}[/results|/metrics]], POST /v1/batches/{id}/cancel."""

from __future__ import annotations

import csv
import datetime as dt
import io
import json
from collections.abc import Iterator
from typing import Annotated, Literal

from fastapi import APIRouter, Header, HTTPException, Query, Request, Response, status
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import StreamingResponse
from sqlalchemy.orm import Session

from service.api.deps import OPTIONAL_KEY, CurrentKey, DatabaseDep, ReadSessionDep, SettingsDep, ViewerDep
from service.api.openapi import inline_schema
from service.batches import store
from service.batches.lines import one_line
from service.batches.metrics import batch_metrics
from service.batches.parse import (
    Parsed,
    UploadError,
    parse_upload,
)
from service.batches.schemas import (
    BatchAccepted,
    BatchList,
    BatchMetrics,
    BatchOut,
    ResultRow,
    Sample,
)
from service.core.config import Settings
from service.core.ratelimit import lock_key
from service.db.models import ApiKey, Batch
from service.db.session import Database
from service.visibility import Viewer

router = APIRouter(prefix="/v1/batches", tags=["batches"])

RESULT_PAGE = 500
"""Rows per database page while streaming results: memory stays flat whatever the batch size."""
CSV_COLUMNS = list(ResultRow.model_fields)

_REQUEST_BODY = {
    "required": True,
    "content": {
        "application/x-ndjson": {"schema": {"type": "string", "description": "One JSON Sample per line."},
                                 "example": '{"task": "kl_div", "completion": "...", "model": "m"}\n'},
        "application/json": {"schema": {"oneOf": [{"type": "array", "items": inline_schema(Sample)},
                                                  {"type": "object", "properties": {
                                                      "name": {"type": "string"}, "tags": {"type": "array"},
                                                      "samples": {"type": "array",
                                                                  "items": inline_schema(Sample)}}}]}},
    },
}


async def read_body(request: Request, limit: int) -> bytes:
    """The body, refused with 413 as soon as it passes `limit` bytes (declared or streamed)."""
    declared = request.headers.get("content-length")
    if declared and declared.isdigit() and int(declared) > limit:
        raise too_large(int(declared), limit)
    size, chunks = 0, []
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise too_large(None, limit)
        chunks.append(chunk)
    return b"".join(chunks)


def too_large(size: int | None, limit: int) -> HTTPException:
    got = f" ({size} bytes)" if size is not None else ""
    return HTTPException(status.HTTP_413_CONTENT_TOO_LARGE,
                         {"message": f"the request body is too large{got}; the limit is {limit} bytes "
                                     "(JUDGE_MAX_BATCH_BYTES): split the batch", "limit_bytes": limit})


def media_type(request: Request) -> str:
    return request.headers.get("content-type", "application/json").split(";")[0].strip().lower()


def parse_or_raise(body: bytes, content_type: str, settings: Settings) -> Parsed:
    try:
        return parse_upload(body, content_type, settings.max_source_bytes, settings.max_batch_samples)
    except UploadError as exc:
        raise HTTPException(exc.status, {"message": str(exc), "rejected": []}) from None


def check_quota(session: Session, key: ApiKey, new_jobs: int, settings: Settings) -> None:
    pending = store.unfinished_batch_jobs(session, key.id)
    if pending + new_jobs > settings.batch_queue_quota:
        raise HTTPException(status.HTTP_429_TOO_MANY_REQUESTS,
                            f"batch queue quota: {pending} unfinished batch jobs plus up to {new_jobs} new would pass "
                            f"JUDGE_BATCH_QUEUE_QUOTA={settings.batch_queue_quota}; wait for some to finish",
                            headers={"Retry-After": str(settings.quota_retry_after_s)})


def admit(db: Database, settings: Settings, key: ApiKey, parsed: Parsed, kind: str) -> store.Created:
    """Quota, then the bulk insert, in one transaction holding the key's row (concurrent batches of one key are
    counted against the quota one at a time): durable (and queued) once this returns."""
    try:
        with db.transaction() as session:
            lock_key(session, key.id)
            check_quota(session, key, len(parsed.samples), settings)
            return store.create_batch(session, key, parsed.samples, name=parsed.name, tags=parsed.tags, kind=kind,
                                      rejected=parsed.rejected, codes=parsed.codes)
    except store.NoSamples as exc:
        raise no_samples(exc.rejected) from None


def no_samples(rejected: list) -> HTTPException:
    """422 for an upload with nothing to judge: the lines to fix, or, with no line at all, what a line is."""
    message = ("no line of the upload is a valid sample; fix the lines listed" if rejected else
               "the upload holds no samples: send one JSON object per line (JSONL), or a JSON list of objects, "
               'each with "task" and one of "source" and "completion"')
    return HTTPException(status.HTTP_422_UNPROCESSABLE_CONTENT,
                         {"message": message, "rejected": [r.model_dump() for r in rejected]})


@router.post(
    "",
    status_code=status.HTTP_202_ACCEPTED,
    response_model=BatchAccepted,
    summary="Submit a batch of samples (JSONL or JSON)",
    openapi_extra={"requestBody": _REQUEST_BODY},
    responses={
        401: {"description": "No or unknown API key."},
        413: {"description": "Body larger than JUDGE_MAX_BATCH_BYTES or more than JUDGE_MAX_BATCH_SAMPLES samples."},
        415: {"description": "Not JSONL or JSON."},
        422: {"description": "No valid sample (the body lists every line's error), or the body is not UTF-8/JSON."},
        429: {"description": "Batch queue quota exceeded; see Retry-After."},
    },
)
async def create_batch(request: Request, response: Response, key: CurrentKey, db: DatabaseDep,
                       settings: SettingsDep,
                       name: Annotated[str | None, Query(max_length=200)] = None) -> BatchAccepted:
    """Queue many samples at once and return at once (202). Each line (or list item) is a `Sample`: `task`, one of
    `source` and `completion`, and optionally `model`, `sample_index`, `sampling`, `metadata`, `parent_id`, `turn`,
    `public` (`true`: anyone may read that sample's source; default private to you). Bad lines are listed in
    `rejected` by line number and the good ones are accepted. Samples of the same task whose extracted code is
    identical are judged once: the later ones are stored as duplicates sharing the verdict. Follow the batch at
    the returned `url`."""
    body = await read_body(request, settings.max_batch_bytes)
    parsed = await run_in_threadpool(parse_or_raise, body, media_type(request), settings)
    if name is not None:
        parsed.name = name
    if not parsed.samples:
        raise no_samples(parsed.rejected)
    created = await run_in_threadpool(admit, db, settings, key, parsed, "batch")
    url = f"/v1/batches/{created.batch.id}"
    response.headers["Location"] = url
    return BatchAccepted(id=created.batch.id, url=url, accepted=len(created.samples), duplicates=created.duplicates,
                         judged=len(created.samples) - created.duplicates, rejected=created.rejected)


@router.get("", response_model=BatchList, summary="Your batches, newest first",
            responses={401: {"description": "No or unknown API key."},
                       404: {"description": "The cursor is not one of your batches."}})
def list_batches(key: CurrentKey, session: ReadSessionDep,
                 limit: Annotated[int, Query(ge=1, le=100)] = 20,
                 cursor: Annotated[str | None, Query(max_length=32, description=(
                     "`next_cursor` of the previous page (the id of its last batch); 404 if it is not one of "
                     "yours."))] = None,
                 offset: Annotated[int, Query(ge=0, le=100_000)] = 0) -> BatchList:
    try:
        return store.list_batches(session, key.id, limit, cursor, offset)
    except LookupError as exc:
        # As GET /v1/submissions: an unknown cursor names nothing of the caller's, a 404 (not a malformed query).
        raise HTTPException(status.HTTP_404_NOT_FOUND, {
            "message": str(exc), "errors": [{"loc": ("query", "cursor"), "msg": "unknown cursor"}]}) from None


def get_batch(session: Session, batch_id: str) -> Batch:
    batch = session.get(Batch, batch_id)
    if batch is None:
        raise HTTPException(status.HTTP_404_NOT_FOUND, f"no batch {batch_id!r}")
    return batch


@router.get("/{batch_id}", response_model=BatchOut, summary="State, progress and metrics of a batch")
def read_batch(batch_id: str, session: ReadSessionDep,
               metrics: Annotated[bool, Query(description="Include the overall metrics (false: cheaper, for "
                                                          "frequent polling)")] = True) -> BatchOut:
    """Anyone with the id may read it (as for submissions). `counts` are the judged jobs by state; `verdicts` the
    samples by verdict (duplicates counted with the verdict they share); `eta_s` comes from this batch's own
    throughput so far."""
    return store.batch_view(session, get_batch(session, batch_id), with_metrics=metrics)


@router.get("/{batch_id}/metrics", response_model=BatchMetrics, summary="Paper metrics of a batch")
def read_metrics(batch_id: str, session: ReadSessionDep) -> BatchMetrics:
    """Compile and correctness rates, fast_p against eager and torch.compile (KernelBench's definition),
    geometric-mean speedup of correct samples, pass@k and best-of-k speedup (unbiased estimators), overall and
    per (task, model). Definitions: service.batches.metrics."""
    get_batch(session, batch_id)
    return BatchMetrics(**batch_metrics(store.outcomes(session, batch_id)))


def _csv_line(row: ResultRow) -> str:
    out = io.StringIO()
    values = []
    for name in CSV_COLUMNS:
        value = getattr(row, name)
        if isinstance(value, bool):
            value = "true" if value else "false"
        elif isinstance(value, dict):
            value = json.dumps(value, sort_keys=True)
        elif hasattr(value, "value"):
            value = value.value
        values.append("" if value is None else value)
    csv.writer(out, lineterminator="\n").writerow(values)
    return out.getvalue()


def stream_results(db: Database, batch_id: str, fmt: str, viewer: Viewer, public_after: dt.datetime | None
                   ) -> Iterator[str]:
    """One short read transaction per page of RESULT_PAGE rows: never the whole batch in memory, and no
    transaction held open while the client reads slowly. A private sample's diagnosis only to its submitter's keys
    and the admin key."""
    if fmt == "csv":
        yield ",".join(CSV_COLUMNS) + "\n"
    after = 0
    while True:
        with db.transaction(read_only=True) as session:
            page = store.results_page(session, batch_id, after, RESULT_PAGE, viewer=viewer, public_after=public_after)
        for row in page:
            yield _csv_line(row) if fmt == "csv" else one_line(row.model_dump_json()) + "\n"
        if len(page) < RESULT_PAGE:
            return
        after = page[-1].line


@router.get(
    "/{batch_id}/results",
    summary="Per-sample results, streamed as JSONL or CSV",
    response_class=StreamingResponse,
    openapi_extra=OPTIONAL_KEY,
    responses={401: {"description": "An unknown or revoked key."},
               200: {"content": {"application/x-ndjson": {"schema": inline_schema(ResultRow)},
                                 "text/csv": {}},
                     "description": "One row per sample in line order (a ResultRow); unfinished: status null."}},
)
def read_results(batch_id: str, db: DatabaseDep, viewer: ViewerDep, settings: SettingsDep,
                 format: Annotated[Literal["jsonl", "csv"] | None, Query(description="Default jsonl; or send "
                                                                                      "Accept: text/csv")] = None,
                 accept: Annotated[str | None, Header()] = None) -> StreamingResponse:
    with db.transaction(read_only=True) as session:
        get_batch(session, batch_id)
    fmt = format or ("csv" if accept and "text/csv" in accept else "jsonl")
    media = "text/csv" if fmt == "csv" else "application/x-ndjson"
    filename = f"batch-{batch_id}.{fmt}"
    return StreamingResponse(stream_results(db, batch_id, fmt, viewer, settings.sources_public_after),
                             media_type=media, headers={"Content-Disposition": f'attachment; filename="{filename}"'})


def cancel(db: Database, key: ApiKey, batch_id: str) -> BatchOut:
    with db.transaction() as session:
        batch = get_batch(session, batch_id)
        if batch.api_key_id != key.id:
            raise HTTPException(status.HTTP_403_FORBIDDEN, "only the key that created a batch may cancel it")
        store.cancel_batch(session, batch)
    with db.transaction(read_only=True) as session:
        return store.batch_view(session, get_batch(session, batch_id))


@router.post("/{batch_id}/cancel", response_model=BatchOut, summary="Cancel a batch's queued jobs",
             responses={403: {"description": "Not your batch."}, 404: {"description": "No such batch."}})
async def cancel_batch(batch_id: str, key: CurrentKey, db: DatabaseDep) -> BatchOut:
    """Queued jobs of the batch are cancelled (they never run, and get no verdict); jobs already claimed by a
    worker finish. Cancelling a finished batch changes nothing. Answers the batch view."""
    return await run_in_threadpool(cancel, db, key, batch_id)
