"""Admin routes: mint, list and revoke API keys with the admin key; keys are stored hashed."""

from __future__ import annotations

from sqlalchemy import select

from service.core.security import hash_key
from service.db.models import ApiKey

from tests.service.conftest import ADMIN_KEY

ADMIN = {"Authorization": f"Bearer {ADMIN_KEY}"}


def test_mint_use_list_revoke(client, db):
    created = client.post("/v1/keys", json={"submitter": "dora"}, headers=ADMIN)
    assert created.status_code == 201
    body = created.json()
    key = body["key"]
    assert key.startswith("kj_") and body["prefix"] == key[:9]
    with db.transaction(read_only=True) as s:
        row = s.get(ApiKey, body["id"])
        assert row.key_hash == hash_key(key) and key not in (row.key_hash, row.prefix)
        assert s.scalars(select(ApiKey.key_hash)).all() == [hash_key(key)]

    submit = {"task": "kl_div", "source": "class ModelNew: pass\n"}
    assert client.post("/v1/submissions", json=submit, headers={"Authorization": f"Bearer {key}"}).status_code == 202
    listed = client.get("/v1/keys", headers=ADMIN).json()
    assert [k["submitter"] for k in listed] == ["dora"] and "key" not in listed[0]

    revoked = client.delete(f"/v1/keys/{body['id']}", headers=ADMIN)
    assert revoked.status_code == 200 and revoked.json()["revoked_at"] is not None
    assert client.post("/v1/submissions", json=submit, headers={"Authorization": f"Bearer {key}"}).status_code == 401
    assert client.delete("/v1/keys/nope", headers=ADMIN).status_code == 404


def test_admin_routes_need_the_admin_key(client, api_key):
    assert client.post("/v1/keys", json={"submitter": "x"}).status_code == 401
    assert client.get("/v1/keys", headers={"Authorization": f"Bearer {api_key}"}).status_code == 401


def test_admin_routes_disabled_without_admin_key(client, settings):
    settings.admin_key = None
    assert client.get("/v1/keys", headers=ADMIN).status_code == 403
