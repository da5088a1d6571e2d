"""Admin routes: mint, list and revoke API keys with the admin key; keys are stored hashed. And `keys create`
on the command line, which writes the database `serve` reads wherever either runs."""

from __future__ import annotations

import os
import subprocess
import sys

import httpx
import pytest
from sqlalchemy import select

from service.core.security import hash_key
from service.db.models import ApiKey

from tests.service.conftest import ADMIN_KEY, ROOT, Proc, free_port, wait_api

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


@pytest.mark.slow  # a real `serve` and the real CLI in subprocesses
def test_keys_create_from_another_directory_writes_the_database_serve_reads(tmp_path, judge_dirs):
    # The embedded default, as a user has it: no DATABASE_URL, no JUDGE_DATA_DIR; serve in one directory, keys
    # created in another (the case: from /tmp it made a new ./data and the service refused the key).
    env = {k: v for k, v in os.environ.items()
           if k not in ("DATABASE_URL", "JUDGE_DATABASE_URL", "JUDGE_DATA_DIR", "XDG_DATA_HOME")}
    env.update(judge_dirs, HOME=str(tmp_path / "home"), PYTHONPATH=str(ROOT))  # this tree, from any directory
    expected_db = tmp_path / "home" / ".local" / "share" / "kernel-judge" / "judge.db"
    serve_dir, other_dir = tmp_path / "project", tmp_path / "elsewhere"
    serve_dir.mkdir()
    other_dir.mkdir()
    port = free_port()
    serve = Proc([sys.executable, "-m", "service.cli.main", "serve", "--no-worker", "--port", str(port)], env,
                 tmp_path / "serve.log", cwd=serve_dir)
    base = f"http://127.0.0.1:{port}"
    try:
        wait_api(serve, base, 120)
        made = subprocess.run([sys.executable, "-m", "service.cli.main", "keys", "create", "zoe"], env=env,
                              cwd=other_dir, capture_output=True, text=True, timeout=120, check=False)
        assert made.returncode == 0, made.stderr
        key = made.stdout.strip()
        assert key.startswith("kj_") and "\n" not in key  # stdout is the key alone: $(kernel-judge keys create ...)
        assert f"key for zoe written to sqlite:///{expected_db}" in made.stderr
        assert f"database: sqlite:///{expected_db}" in serve.output()
        assert not (serve_dir / "data").exists() and not (other_dir / "data").exists()
        submit = {"task": "kl_div", "source": "class ModelNew: pass\n"}
        accepted = httpx.post(f"{base}/v1/submissions", json=submit, headers={"Authorization": f"Bearer {key}"})
        assert accepted.status_code == 202, accepted.text  # the running service knows the key
        unknown = httpx.post(f"{base}/v1/submissions", json=submit, headers={"Authorization": f"Bearer {key}x"})
        assert unknown.status_code == 401
    finally:
        serve.close()
