"""Dependencies declared once as `Annotated` types: settings, database, sessions, the caller's key (or who the caller
is, where no key is needed)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Annotated

from fastapi import Depends, HTTPException, Request, status
from fastapi.security import APIKeyHeader, HTTPAuthorizationCredentials, HTTPBearer
from sqlalchemy.orm import Session

from reference import Task, UnknownTask, all_tasks, get_task
from service import crud
from service.api.stream_hub import StreamHub
from service.api.verdict_waits import VerdictWaits
from service.core.config import Settings
from service.core.security import same_secret
from service.db.models import ApiKey
from service.db.session import Database
from service.visibility import ADMIN, ANONYMOUS, Viewer


def get_settings(request: Request) -> Settings:
    return request.app.state.settings


def get_db(request: Request) -> Database:
    return request.app.state.db


def get_verdict_waits(request: Request) -> VerdictWaits | None:
    """None where the app runs without its lifespan (no listener was started): waiters then only poll."""
    return getattr(request.app.state, "verdict_waits", None)


def get_stream_hub(request: Request) -> StreamHub:
    """The app's hub; where the app runs without its lifespan, one made on first need (streams then only poll)."""
    hub = getattr(request.app.state, "stream_hub", None)
    if hub is None:
        settings = request.app.state.settings
        hub = StreamHub(request.app.state.db, settings.sse_poll_s, settings.sources_public_after, None)
        request.app.state.stream_hub = hub
    return hub


SettingsDep = Annotated[Settings, Depends(get_settings)]
DatabaseDep = Annotated[Database, Depends(get_db)]
VerdictWaitsDep = Annotated[VerdictWaits | None, Depends(get_verdict_waits)]
StreamHubDep = Annotated[StreamHub, Depends(get_stream_hub)]


def get_read_session(db: DatabaseDep) -> Iterator[Session]:
    with db.transaction(read_only=True) as session:
        yield session


def get_session(db: DatabaseDep) -> Iterator[Session]:
    """A write transaction around the route, committed when the route returns."""
    with db.transaction() as session:
        yield session


# scope="function": the transaction ends (commits, or fails) before the response is sent, so a 2xx is only
# ever sent for committed work, and a failed commit becomes an error response rather than a lost write.
ReadSessionDep = Annotated[Session, Depends(get_read_session, scope="function")]
SessionDep = Annotated[Session, Depends(get_session, scope="function")]


# Declared as security schemes (not plain headers) so OpenAPI says how to authenticate and /docs offers
# "Authorize". auto_error=False: a missing key is our 401 with our message, and anonymous routes stay open.
_bearer = HTTPBearer(auto_error=False, scheme_name="bearer",
                     description="`Authorization: Bearer <key>`: an API key (`kj_...`), or JUDGE_ADMIN_KEY for "
                                 "admin routes.")
_api_key_header = APIKeyHeader(name="X-API-Key", auto_error=False, scheme_name="apiKeyHeader",
                               description="The same key in an `X-API-Key` header, for clients that cannot set "
                                           "Authorization.")


def bearer_token(credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)],
                 x_api_key: Annotated[str | None, Depends(_api_key_header)]) -> str | None:
    if credentials is not None and credentials.credentials:
        return credentials.credentials.strip()
    return x_api_key


TokenDep = Annotated[str | None, Depends(bearer_token)]

_UNAUTHORIZED = {"WWW-Authenticate": "Bearer"}


def current_key(token: TokenDep, db: DatabaseDep) -> ApiKey:
    if not token:
        raise HTTPException(status.HTTP_401_UNAUTHORIZED, "an API key is required: Authorization: Bearer <key>",
                            headers=_UNAUTHORIZED)
    with db.transaction(read_only=True) as session:
        key = crud.find_key(session, token)
    if key is None:
        raise HTTPException(status.HTTP_401_UNAUTHORIZED, "unknown or revoked API key", headers=_UNAUTHORIZED)
    return key


CurrentKey = Annotated[ApiKey, Depends(current_key)]


def current_viewer(token: TokenDep, db: DatabaseDep, settings: SettingsDep) -> Viewer:
    """Who asks, for routes readable without a key whose answer depends on the caller (service/visibility.py):
    no key is the anonymous viewer; the admin key is the admin; an unknown or revoked key is a 401, never quietly
    anonymous, so a client with a stale key learns it."""
    if not token:
        return ANONYMOUS
    if settings.admin_key and same_secret(token, settings.admin_key):
        return ADMIN
    with db.transaction(read_only=True) as session:
        key = crud.find_key(session, token)
    if key is None:
        raise HTTPException(status.HTTP_401_UNAUTHORIZED, "unknown or revoked API key", headers=_UNAUTHORIZED)
    return Viewer(submitter=key.submitter)


ViewerDep = Annotated[Viewer, Depends(current_viewer)]
OPTIONAL_KEY = {"security": [{}]}
"""`openapi_extra` of a route taking ViewerDep: FastAPI lists the key schemes as required, and this adds the empty
requirement that OpenAPI reads as "or no key at all"."""


def require_admin(token: TokenDep, settings: SettingsDep) -> None:
    if not settings.admin_key:
        raise HTTPException(status.HTTP_403_FORBIDDEN, "admin routes are disabled: JUDGE_ADMIN_KEY is not set")
    if not token or not same_secret(token, settings.admin_key):
        raise HTTPException(status.HTTP_401_UNAUTHORIZED, "the admin key is required", headers=_UNAUTHORIZED)


AdminDep = Depends(require_admin)


def unknown_task(task_id: str) -> HTTPException:
    valid = [t.id.value for t in all_tasks()]
    return HTTPException(status.HTTP_404_NOT_FOUND,
                         {"message": f"unknown task {task_id!r}", "valid_task_ids": valid})


def task_by_id(task_id: str) -> Task:
    try:
        return get_task(task_id)
    except UnknownTask:
        raise unknown_task(task_id) from None


TaskDep = Annotated[Task, Depends(task_by_id)]
