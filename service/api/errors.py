"""One error body for every 4xx and 5xx the API sends, and the guards that keep bad input from the database.

Every error answers `{"detail": str, "errors": [{"loc": [...], "msg": str, "type": str | null}]}`
(schemas.ErrorBody): `detail` says what went wrong and what to fix; `errors` lists the offending fields when
there are any (a validation error names each one). A few errors add a field (`valid_task_ids` with an
unknown task, `limit_bytes` with a 413). Routes raise plain `HTTPException`s: a string detail, or a dict with
`message`, optional `errors` and extra fields; `install` turns both, FastAPI's validation errors and
Starlette's 404/405 into that shape.

Guards:
- NUL characters: PostgreSQL text cannot hold them, so a NUL anywhere in a path or query parameter is refused
  here, once, before routing (request bodies are checked by the schemas' field types).
- A single-valued query parameter repeated is a 422, not its last value read silently.
- The database away: a connection failure answers 503 with `Retry-After` instead of a 500. A write refused for
  a full disk answers 507, one refused by a read-only database 503, each saying which (`storage_fault`;
  service/db/storage.py).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from types import UnionType
from typing import Any, Union, get_args, get_origin
from urllib.parse import unquote_to_bytes

from fastapi import Depends, FastAPI, HTTPException, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from sqlalchemy.exc import DBAPIError, OperationalError
from sqlalchemy.exc import TimeoutError as PoolTimeout
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.types import ASGIApp, Receive, Scope, Send

from service.db import storage

DATABASE_RETRY_AFTER_S = 5
"""Retry-After sent while the database does not answer: a restart or fail-over usually takes seconds."""


def error_body(detail: str, errors: list[dict] | None = None, **extra: Any) -> dict[str, Any]:
    return {"detail": detail, "errors": errors or [], **{k: v for k, v in extra.items() if v is not None}}


def _loc(loc: Any) -> list[str | int]:
    return [part if isinstance(part, (str, int)) else str(part) for part in loc]


def field_errors(errors: list[dict]) -> list[dict[str, Any]]:
    """pydantic's errors reduced to where and what: the rejected input is not echoed back (it may be huge, or
    hold the very NaN or NUL that was refused)."""
    return [{"loc": _loc(e.get("loc", ())), "msg": str(e.get("msg", "")), "type": e.get("type")} for e in errors]


def summary(errors: list[dict[str, Any]]) -> str:
    if not errors:
        return "invalid request"
    first = errors[0]
    where = ".".join(str(p) for p in first["loc"])
    more = f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""
    return f"invalid request: {where}: {first['msg']}{more}"


def _from_http(exc: StarletteHTTPException) -> JSONResponse:
    detail = exc.detail
    if isinstance(detail, dict):
        extra = {k: v for k, v in detail.items() if k not in ("message", "errors")}
        body = error_body(str(detail.get("message", "")), field_errors(detail.get("errors") or []), **extra)
    else:
        body = error_body(str(detail))
    return JSONResponse(body, status_code=exc.status_code, headers=getattr(exc, "headers", None))


async def _http_error(_request: Request, exc: StarletteHTTPException) -> JSONResponse:
    return _from_http(exc)


async def _validation_error(_request: Request, exc: RequestValidationError) -> JSONResponse:
    errors = field_errors(list(exc.errors()))
    return JSONResponse(error_body(summary(errors), errors), status_code=422)


async def _database_away(_request: Request, exc: Exception) -> JSONResponse:
    fault = storage.classify(exc)
    if fault is not None:  # not an outage: named, and no Retry-After (retrying soon will not help)
        return JSONResponse(error_body(storage.MESSAGES[fault], storage_fault=fault.value),
                            status_code=storage.STATUS[fault])
    if isinstance(exc, DBAPIError) and not isinstance(exc, OperationalError) and not exc.connection_invalidated:
        raise exc  # a real bug (a constraint, a type): let it be a 500 and be logged, not disguised as an outage
    return JSONResponse(error_body("the database is not answering; retry shortly"), status_code=503,
                        headers={"Retry-After": str(DATABASE_RETRY_AFTER_S)})


def _query_fields(dependant: Any) -> Iterator[Any]:
    yield from dependant.query_params
    for sub in dependant.dependencies:
        yield from _query_fields(sub)


def _is_sequence(annotation: Any) -> bool:
    origin = get_origin(annotation)
    if origin in (list, set, tuple, frozenset):
        return True
    return origin in (Union, UnionType) and any(_is_sequence(arg) for arg in get_args(annotation))


async def refuse_repeated_query(request: Request) -> None:
    """A single-valued query parameter given twice (`?model=a&model=b`) is refused, not silently read as its
    last value. Runs on every route (an app-wide dependency); costs nothing when no name repeats."""
    counts = Counter(name for name, _ in request.query_params.multi_items())
    repeated = {name for name, n in counts.items() if n > 1}
    dependant = getattr(request.scope.get("route"), "dependant", None)
    if not repeated or dependant is None:
        return
    fields = list(_query_fields(dependant))
    single = sorted((repeated & {f.alias for f in fields}) - {f.alias for f in fields
                                                             if _is_sequence(f.field_info.annotation)})
    if single:
        raise HTTPException(422, {"message": f"query parameter {single[0]!r} was given {counts[single[0]]} times; "
                                             "give it once",
                                  "errors": [{"loc": ("query", name), "msg": "give this parameter once"}
                                             for name in single]})


class RefuseNul:
    """ASGI middleware: 422 for a NUL character (raw or %00) in the path or the query string."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            where = None
            if "\x00" in scope.get("path", ""):
                where = "path"
            elif b"\x00" in unquote_to_bytes(scope.get("query_string", b"")):
                where = "query"
            if where is not None:
                response = JSONResponse(error_body(f"the {where} contains a NUL character (%00); remove it",
                                                   [{"loc": [where], "msg": "NUL characters are not allowed"}]),
                                        status_code=422)
                await response(scope, receive, send)
                return
        await self.app(scope, receive, send)


def _refuse_nul_documented(schema: dict[str, Any]) -> None:
    """Give every string in a parameter's schema the no-NUL pattern RefuseNul enforces (unless it has one)."""
    from service.api.schemas import NO_NUL

    if schema.get("type") == "string" and "enum" not in schema:
        schema.setdefault("pattern", NO_NUL)
    for key in ("anyOf", "oneOf", "allOf"):
        for option in schema.get(key, []):
            _refuse_nul_documented(option)
    if isinstance(schema.get("items"), dict):
        _refuse_nul_documented(schema["items"])


def _document_error_bodies(app: FastAPI) -> None:
    """Make the OpenAPI document say what the handlers above do, on every route, ours or not: every error
    response carries an ErrorBody (FastAPI documents validation errors as its own `HTTPValidationError`, and a
    route's `responses` often give only a description); an operation with a security requirement can answer
    401, one with a path parameter 404, one with a body 400 (FastAPI's answer to a body it cannot decode); a
    string in the path or the query matches no NUL (RefuseNul)."""
    from service.api.schemas import ErrorBody

    build = app.openapi

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is not None:
            return app.openapi_schema
        spec = build()
        components = spec.setdefault("components", {}).setdefault("schemas", {})
        if "ErrorBody" not in components:
            schema = ErrorBody.model_json_schema(ref_template="#/components/schemas/{model}")
            components.update(schema.pop("$defs", {}))
            components["ErrorBody"] = schema
        error = {"application/json": {"schema": {"$ref": "#/components/schemas/ErrorBody"}}}
        for path in spec.get("paths", {}).values():
            for operation in path.values():
                answers = operation.setdefault("responses", {})
                if operation.get("security"):
                    answers.setdefault("401", {"description": _DESCRIPTIONS[401]})
                if any(p.get("in") == "path" for p in operation.get("parameters", [])):
                    answers.setdefault("404", {"description": _DESCRIPTIONS[404]})
                if "requestBody" in operation:
                    answers.setdefault("400", {"description": _DESCRIPTIONS[400]})
                for parameter in operation.get("parameters", []):
                    if parameter.get("in") in ("path", "query"):
                        _refuse_nul_documented(parameter.get("schema", {}))
                for code, response in answers.items():
                    refs = [media.get("schema", {}).get("$ref", "") for media in response.get("content", {}).values()]
                    # An error body is JSON even where the route answers text (FastAPI documents it as the route's
                    # media type).
                    if code[0] in "45" and (not refs or any(r.endswith(("/HTTPValidationError", "/ErrorBody"))
                                                            for r in refs)):
                        response["content"] = dict(error)
        for unused in ("HTTPValidationError", "ValidationError"):
            components.pop(unused, None)
        return spec

    app.openapi = openapi


def install(app: FastAPI) -> None:
    """Register the handlers, the NUL guard and the documented error body on the app."""
    _document_error_bodies(app)
    app.add_exception_handler(StarletteHTTPException, _http_error)
    app.add_exception_handler(RequestValidationError, _validation_error)
    app.add_exception_handler(OperationalError, _database_away)
    app.add_exception_handler(PoolTimeout, _database_away)
    app.add_exception_handler(DBAPIError, _database_away)
    app.add_middleware(RefuseNul)
    # Routers included after this (service.main includes them after install) inherit the dependency.
    app.router.dependencies.append(Depends(refuse_repeated_query))


_DESCRIPTIONS = {
    400: "The body could not be parsed at all (e.g. JSON that is not UTF-8).",
    401: "No API key, or an unknown or revoked one (`WWW-Authenticate: Bearer`).",
    403: "Not allowed with this key (or admin routes disabled: JUDGE_ADMIN_KEY unset).",
    404: "No such resource; an unknown task lists the valid task ids.",
    409: "Conflicts with an earlier request (an idempotency key reused for a different submission).",
    413: "Too large; `limit_bytes` says the limit.",
    415: "Unsupported Content-Type.",
    422: "Invalid input (a field, a NUL character, a non-finite number); `errors` names each field.",
    429: "Rate limit or queue quota reached; retry after `Retry-After` seconds.",
    503: "The database is not answering; retry after `Retry-After` seconds. Or it is read-only "
         "(`storage_fault`: \"read-only\"): an operator must act.",
    507: "The database's disk is full (`storage_fault`: \"disk full\"): nothing new can be stored until an operator "
         "frees space.",
}


def responses(*codes: int) -> dict[int | str, dict[str, Any]]:
    """OpenAPI `responses` for a route: each error status it can answer, with the shared error body."""
    from service.api.schemas import ErrorBody

    return {code: {"model": ErrorBody, "description": _DESCRIPTIONS[code]} for code in codes}
