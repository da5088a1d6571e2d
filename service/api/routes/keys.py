"""Admin: mint, list and revoke API keys (Authorization: Bearer $JUDGE_ADMIN_KEY)."""

from __future__ import annotations

from fastapi import APIRouter, HTTPException, status

from service import crud
from service.api import schemas
from service.api.deps import AdminDep, ReadSessionDep, SessionDep
from service.api.errors import responses

router = APIRouter(prefix="/v1/keys", tags=["admin"], dependencies=[AdminDep], responses=responses(401, 403, 503))


@router.post("", response_model=schemas.KeyCreated, status_code=status.HTTP_201_CREATED, summary="Mint an API key",
             responses=responses(422))
def create_key(body: schemas.KeyCreate, session: SessionDep) -> schemas.KeyCreated:
    """The key is in the response and nowhere else: only its hash is stored."""
    row, key = crud.create_key(session, body.submitter)
    return schemas.KeyCreated(**crud.key_out(row).model_dump(), key=key)


@router.get("", response_model=list[schemas.KeyOut], summary="List API keys")
def list_keys(session: ReadSessionDep) -> list[schemas.KeyOut]:
    return [crud.key_out(k) for k in crud.list_keys(session)]


@router.delete("/{key_id}", response_model=schemas.KeyOut, summary="Revoke an API key", responses=responses(404, 422))
def revoke_key(key_id: str, session: SessionDep) -> schemas.KeyOut:
    row = crud.revoke_key(session, key_id)
    if row is None:
        raise HTTPException(status.HTTP_404_NOT_FOUND, f"no key {key_id!r}")
    return crud.key_out(row)
