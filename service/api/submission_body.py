"""The body of POST /v1/submissions, read, parsed and validated by one dependency (`SubmissionBody`).

Two forms arrive: JSON (`SubmissionCreate`), or the candidate itself as the raw body (`text/*` or
`application/octet-stream`) with the task and metadata in the query string. Both end as one validated
`SubmissionCreate`; the route never sees bytes. The body is read with a size cap (413 before reading when
Content-Length already says too much), so a huge upload costs nothing.
"""

from __future__ import annotations

from typing import Annotated, Literal

from fastapi import Depends, Header, HTTPException, Query, Request, status
from pydantic import ValidationError

from reference import UnknownTask, get_task
from service.api import schemas
from service.api.deps import SettingsDep, unknown_task
from service.api.openapi import inline_schema

TEXT_TYPES = ("text/", "application/octet-stream")

REQUEST_BODY = {
    "required": True,
    "content": {
        "application/json": {"schema": inline_schema(schemas.SubmissionCreate)},
        "text/plain": {"schema": {**schemas.SubmissionCreate.model_json_schema()["properties"]["source"], "description":
                                  "The candidate as the raw body (UTF-8); `task` (required) and the metadata go in "
                                  "the query string."}},
    },
}
"""The request body as OpenAPI documents it (the route reads the body itself, so FastAPI cannot infer it)."""


def too_large(what: str, size: int | None, limit: int, setting: str) -> HTTPException:
    got = f" ({size} bytes)" if size is not None else ""
    return HTTPException(status.HTTP_413_CONTENT_TOO_LARGE,
                         {"message": f"{what} is too large{got}; the limit is {limit} bytes ({setting})",
                          "limit_bytes": limit})


def invalid(message: str, errors: list | None = None) -> HTTPException:
    return HTTPException(status.HTTP_422_UNPROCESSABLE_CONTENT, {"message": message, "errors": errors or []})


def body_too_large(size: int | None, limit: int, source_limit: int) -> HTTPException:
    """A submission's body over the request limit: almost always a source over its own, smaller limit, so the
    message names that one too (a user who sent a 5 MB kernel needs 256 KiB, not the request's 512 KiB)."""
    exc = too_large("the request body", size, limit, "JUDGE_MAX_REQUEST_BYTES")
    exc.detail["message"] += f"; a kernel source may be at most {source_limit} bytes (JUDGE_MAX_SOURCE_BYTES)"
    exc.detail["source_limit_bytes"] = source_limit
    return exc


async def _read(request: Request, limit: int, source_limit: int) -> bytes:
    declared = request.headers.get("content-length")
    if declared and declared.isdigit() and int(declared) > limit:
        raise body_too_large(int(declared), limit, source_limit)
    size, chunks = 0, []
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise body_too_large(None, limit, source_limit)
        chunks.append(chunk)
    return b"".join(chunks)


def _decode(body: bytes, what: str) -> str:
    try:
        return body.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise invalid(f"{what} is not valid UTF-8: byte {body[exc.start]:#04x} at offset {exc.start}") from None


def _where(where: str, loc: tuple) -> tuple:
    # In the text form only the source is the body; every other field came from the query string.
    return ("body", *loc) if where == "query" and loc[:1] == ("source",) else (where, *loc)


def _validated(fields: dict | bytes, where: str) -> schemas.SubmissionCreate:
    try:
        if isinstance(fields, bytes):
            return schemas.SubmissionCreate.model_validate_json(fields)
        return schemas.SubmissionCreate.model_validate(fields)
    except ValidationError as exc:
        errors = [{**e, "loc": _where(where, e["loc"])} for e in exc.errors(include_url=False, include_input=False)]
        first = errors[0]
        raise invalid(f"invalid submission: {'.'.join(map(str, first['loc']))}: {first['msg']}", errors) from None


def _check(body: schemas.SubmissionCreate, max_source_bytes: int) -> schemas.SubmissionCreate:
    """What the schema cannot say: the source's encoded size, that it is not blank, that the task exists."""
    try:
        encoded = body.source.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise invalid(f"the source is not valid UTF-8 (unpaired surrogate at character {exc.start})") from None
    if len(encoded) > max_source_bytes:
        raise too_large("the source", len(encoded), max_source_bytes, "JUDGE_MAX_SOURCE_BYTES")
    if not body.source.strip():
        raise invalid("the source is empty")
    try:
        get_task(body.task)
    except UnknownTask:
        raise unknown_task(body.task) from None
    return body


async def submission_body(
    request: Request,
    settings: SettingsDep,
    task: Annotated[str | None, Query(description="With a text body (required there): the task id.")] = None,
    model: Annotated[str | None, Query(max_length=200, description="With a text body: the model's name.")] = None,
    sample_index: Annotated[int | None, Query(ge=0, le=schemas.MAX_SAMPLE_INDEX,
                                              description="With a text body: the sample's index.")] = None,
    tag: Annotated[list[str] | None, Query(description="With a text body: a label (repeat for several).")] = None,
    # "true" or "false" only: a bool parameter would also take 1, "yes" or "on", which OpenAPI calls invalid.
    public: Annotated[Literal["true", "false"] | None, Query(
        description="With a text body: `true` makes the source readable by anyone (default private).")] = None,
    profile: Annotated[Literal["true", "false"] | None, Query(
        description="With a text body: `true` profiles its kernels after the verdict (GET .../profile).")] = None,
    idempotency_key_query: Annotated[str | None, Query(
        alias="idempotency_key", min_length=1, max_length=200,
        description="With a text body: the idempotency key (or use the Idempotency-Key header).")] = None,
    idempotency_key: Annotated[str | None, Header(
        min_length=1, max_length=200,
        description="Resending with the same key returns the first submission (`duplicate: true`).")] = None,
) -> schemas.SubmissionCreate:
    """The validated submission, or the 4xx that says what to fix (413 size, 415 type, 422 field, 404 task).
    The query parameters are read only with a text body; the Idempotency-Key header fills a missing key."""
    raw = await _read(request, settings.max_request_bytes, settings.max_source_bytes)
    content_type = request.headers.get("content-type", "application/json").split(";")[0].strip().lower()
    if content_type.startswith(TEXT_TYPES):
        if not task:
            raise invalid("with a text body, the task goes in the query string: ?task=kl_div",
                          [{"loc": ("query", "task"), "msg": "Field required"}])
        fields = {"task": task, "source": _decode(raw, "the source"), "model": model, "tags": tag or [],
                  "sample_index": sample_index, "idempotency_key": idempotency_key_query, "public": public == "true",
                  "profile": profile == "true"}
        body = _validated(fields, "query")
    elif content_type == "application/json":
        _decode(raw, "the request body")
        body = _validated(raw, "body")
    else:
        raise HTTPException(status.HTTP_415_UNSUPPORTED_MEDIA_TYPE,
                            "send application/json (SubmissionCreate) or text/plain (the source)")
    if idempotency_key and not body.idempotency_key:
        body = _validated({**body.model_dump(exclude={"completion"}), "idempotency_key": idempotency_key}, "header")
    return _check(body, settings.max_source_bytes)


SubmissionBody = Annotated[schemas.SubmissionCreate, Depends(submission_body)]
