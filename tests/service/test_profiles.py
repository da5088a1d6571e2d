"""Profiles on request through the real app on SQLite and PostgreSQL: asked for with `profile: true` (JSON, text,
batch lines), pending until judged, taken by a real worker after the verdict (on this CPU host: "not available on
this host"), served by GET /v1/submissions/{id}/profile, the CLI and the submission page.

The "ok" profile below is what a GPU worker records: the recorded ncu log of tests/fixtures/ncu parsed by the
judge's own parser and stored by the worker's own function (service.profiles.store.record).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import httpx
from rich.console import Console
from sqlalchemy import select

from sandbox.profiling.report import Profile, parse_raw_csv
from service.client import JudgeClient
from service.cli import render
from service.db.models import Submission, VerdictRow
from service.profiles import store
from tests.service.conftest import CORPUS, CORRECT_KL_DIV, ROOT

CORRECT = CORRECT_KL_DIV.read_text()
NCU_LOG = (Path(__file__).resolve().parents[1] / "fixtures" / "ncu" / "kl_div_fast_h100.csv").read_text()
JUDGE_S = 300


def _submit(client, auth, **fields: object) -> str:
    response = client.post("/v1/submissions", json={"task": "kl_div", "source": CORRECT, **fields}, headers=auth)
    assert response.status_code == 202, response.text
    return response.json()["id"]


def test_profile_is_asked_for_with_the_submission_and_pending_until_judged(client, auth):
    asked = _submit(client, auth, profile=True)
    found = client.get(f"/v1/submissions/{asked}/profile")
    assert found.status_code == 200
    body = found.json()
    assert (body["status"], body["submission_id"], body["judged_submission_id"]) == ("pending", asked, asked)
    assert body["profile"] is None and body["text"] is None

    as_text = client.post("/v1/submissions", params={"task": "kl_div", "profile": "true"}, content=CORRECT,
                          headers={**auth, "Content-Type": "text/plain"})
    assert as_text.status_code == 202
    assert client.get(f"/v1/submissions/{as_text.json()['id']}/profile").json()["status"] == "pending"

    not_asked = _submit(client, auth)
    missing = client.get(f"/v1/submissions/{not_asked}/profile")
    assert missing.status_code == 404 and "no profile was asked" in missing.json()["detail"]
    unknown = client.get("/v1/submissions/nope/profile")
    assert unknown.status_code == 404 and "no submission 'nope'" in unknown.json()["detail"]


def test_profile_must_be_a_json_boolean(client, auth):
    for bad in ("yes", 1, None):
        response = client.post("/v1/submissions", json={"task": "kl_div", "source": CORRECT, "profile": bad},
                               headers=auth)
        assert response.status_code == 422, bad
        assert response.json()["errors"][0]["loc"][-1] == "profile"
    text = client.post("/v1/submissions", params={"task": "kl_div", "profile": "on"}, content=CORRECT,
                       headers={**auth, "Content-Type": "text/plain"})
    assert text.status_code == 422


def test_a_batch_duplicate_shares_the_profile_of_the_sample_judged_in_its_place(client, auth, db):
    samples = [{"task": "kl_div", "source": CORRECT}, {"task": "kl_div", "source": CORRECT, "profile": True}]
    batch = client.post("/v1/batches", json=samples, headers=auth)
    assert batch.status_code == 202, batch.text
    with db.transaction(read_only=True) as session:
        first, second = session.scalars(select(Submission).where(Submission.batch_id == batch.json()["id"])
                                        .order_by(Submission.line))
        assert second.duplicate_of == first.id
    for sub_id in (first.id, second.id):
        body = client.get(f"/v1/submissions/{sub_id}/profile").json()
        assert (body["status"], body["judged_submission_id"]) == ("pending", first.id)


def test_recorded_profile_is_served_as_json_text_cli_table_and_page(client, auth, db):
    sub_id = _submit(client, auth, profile=True)
    parsed = parse_raw_csv(NCU_LOG)
    profile = Profile(status="ok", device="cuda:0", device_name="NVIDIA H100 80GB HBM3", ncu_version="2025.3.1.0",
                      calls=3, launches=parsed.launches, launch_limit=32, kernels=parsed.kernels, gpu_seconds=14.5)
    with db.transaction() as session:
        assert store.record(session, sub_id, profile, "gpu-host:1")
    with db.transaction() as session:  # once recorded, never again: a second worker's result is discarded
        assert not store.record(session, sub_id, Profile(status="failed", reason="late"), "other:2")

    body = client.get(f"/v1/submissions/{sub_id}/profile", headers=auth).json()  # private: read with its key
    assert body["status"] == "ok" and body["gpu_seconds"] == 14.5 and not body["withheld"]
    (kernel,) = body["profile"]["kernels"]
    assert kernel["duration_ns"] == 695040 and kernel["grid"] == [132, 1, 1]
    assert body["text"].startswith("Nsight Compute profile (ncu 2025.3.1.0; NVIDIA H100 80GB HBM3)")
    assert "top stalls: long_scoreboard 65%" in body["text"] and len(body["text"]) < 1500

    with JudgeClient("http://testserver", auth["Authorization"].split()[1], transport=_AppTransport(client)) as judge:
        found = judge.profile(sub_id)
    assert found.status == "ok" and found.kernels[0].registers_per_thread == 54
    console = Console(width=200, record=True)
    console.print(render.profile_table(found))
    table = console.export_text()
    assert "kl_fast_kernel" in table and "695.0" in table and "3.09" in table and "long_scoreboard 65%" in table

    # The pages are anonymous: the profile (it names the kernels) shows once the submission is public.
    assert client.patch(f"/v1/submissions/{sub_id}", json={"public": True}, headers=auth).status_code == 200
    page = client.get(f"/submissions/{sub_id}")
    assert page.status_code == 200
    html = page.text
    assert 'id="profile" data-status="ok"' in html and "Nsight Compute 2025.3.1.0" in html
    assert "695.0 µs" in html and "3.09 TB/s" in html and "132×1×1 × 1024×1×1" in html
    assert "14.5 s of device time, not part of the ranked time" in html


class _AppTransport(httpx.BaseTransport):
    """The typed client's requests answered by the app under test (FastAPI's TestClient), without a socket."""

    def __init__(self, client) -> None:
        self.client = client

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        answer = self.client.request(request.method, request.url.path, headers=dict(request.headers),
                                     content=request.content)
        return httpx.Response(answer.status_code, headers=answer.headers, content=answer.content)


def test_a_cpu_worker_judges_then_says_the_profile_is_not_available_here(db, spawn, live_api, api_key, client):
    _, base = live_api()
    spawn("worker")
    cli = [sys.executable, "-m", "service.cli.main"]
    env_args = ["--url", base, "--key", api_key]
    sent = subprocess.run([*cli, "submit", str(CORRECT_KL_DIV), "--task", "kl_div", "--profile", *env_args],
                          check=True, capture_output=True, text=True, cwd=ROOT, timeout=60)
    correct = sent.stdout.strip()
    with JudgeClient(base, api_key) as judge:
        broken = judge.submit("kl_div", (CORPUS / "cpu" / "compile_error.py").read_text(), profile=True).id
        done = {s: judge.wait_profile(s, timeout=JUDGE_S) for s in (correct, broken)}
    assert done[correct].status == "unavailable"
    assert done[correct].reason.startswith("not available on this host: profiles are taken on GPU hosts")
    assert done[broken].status == "unavailable" and "verdict: compile_error" in done[broken].reason
    with db.transaction(read_only=True) as session:
        verdicts = {v.submission_id: v for v in session.scalars(select(VerdictRow))}
    assert verdicts[correct].status.value == "correct" and verdicts[correct].median_ms > 0  # the verdict stands
    shown = subprocess.run([*cli, "profile", correct, "--text", *env_args], check=False, capture_output=True,
                           text=True, cwd=ROOT, timeout=60)
    assert shown.returncode == 0 and shown.stdout.startswith("Profile not available: not available on this host")
    none = subprocess.run([*cli, "profile", _submit(client, {"Authorization": f"Bearer {api_key}"}), *env_args],
                          check=False, capture_output=True, text=True, cwd=ROOT, timeout=60)
    assert none.returncode == 5 and "no profile was asked" in none.stderr
