"""A private submission's diagnostics (the diagnosis, compile errors and the lines they quote, the compiler log,
details, imports, trial messages, its profile) and every digest of its text reach its submitter's keys and the
admin key only: another key and an anonymous visitor get the status and the figures, through the API (the view,
its event stream, the profile, a batch's results) and the page, on SQLite and PostgreSQL. The leaderboard gives
the digest of public code only.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from sandbox.profiling.report import Profile, parse_raw_csv
from sandbox.verdict import CompileError, Performance, Status, TimingStats, TrialResult, Verdict
from service import crud
from service.db.models import Submission
from service.profiles import store as profiles
from service.queue import claims as q
from tests.service.conftest import ADMIN_KEY, CORRECT_KL_DIV, new_key
from tests.service.test_leaderboard import judged as judged_on_board

SECRET = "int secret_line_31337 = 1 +;"
SOURCE = f"{CORRECT_KL_DIV.read_text()}\n# {SECRET}\n"
JUDGED = hashlib.sha256(b"the module the judge extracted").hexdigest()
NCU_LOG = (Path(__file__).resolve().parents[1] / "fixtures" / "ncu" / "kl_div_fast_h100.csv").read_text()
KERNEL = "kl_fast_kernel"
"""The kernel the recorded profile names (tests/fixtures/ncu): a name taken from the candidate's source."""


def _verdict(text_sha256: str) -> Verdict:
    del text_sha256  # the judged digest is the extracted code's, another private digest
    stats = TimingStats(median_ms=1.5, q25_ms=1.4, q75_ms=1.6, min_ms=1.3, mean_ms=1.5, reps=10)
    return Verdict(
        status=Status.INCORRECT, task="kl_div", device="cpu", judged_sha256=JUDGED,
        diagnosis=f"trial 0 failed; candidate.py line 40: {SECRET}",
        compile_errors=[CompileError(file_line=40, sent_line=40, location="main.cpp:3:22", message="note",
                                     kind="other", code=SECRET)],
        compile_log=f"main.cpp:3:22: {SECRET}", details={"errors": [SECRET], "calls": ["secret_call"]},
        imports=["secret_module_31337"],
        trials=[TrialResult(trial=0, distribution="official", shape=[4, 8], seed=7, passed=False,
                            max_abs_error=0.25, max_rel_error=0.5, message=f"RuntimeError at {SECRET}")],
        performance=Performance(candidate=stats, speedups={"eager": 2.0}, min_bytes=1 << 20),
        stages={"compile": 0.5, "correctness": 0.25})


@pytest.fixture
def judged(client, auth, db) -> tuple[str, str]:  # noqa: ANN001
    """A private submission, judged (its verdict quotes its source) and profiled; returns (id, text digest)."""
    response = client.post("/v1/submissions", json={"task": "kl_div", "source": SOURCE, "profile": True},
                           headers=auth)
    assert response.status_code == 202, response.text
    sub_id = response.json()["id"]
    (claim,) = q.claim(db, "w", 1, 60)
    assert q.finish(db, claim.token, _verdict(claim.text_sha256), "w", q.RetryPolicy()) == "verdict"
    parsed = parse_raw_csv(NCU_LOG)
    with db.transaction() as session:
        assert profiles.record(session, sub_id, Profile(status="ok", device="cuda:0", calls=3, kernels=parsed.kernels,
                                                        launches=parsed.launches, launch_limit=32), "gpu:1")
    return sub_id, hashlib.sha256(SOURCE.encode()).hexdigest()


def _private_bits(digest: str) -> list[str]:
    return [SECRET, "secret_call", "secret_module_31337", KERNEL, digest, JUDGED]


def _viewers(db, auth) -> dict[str, dict[str, str]]:  # noqa: ANN001
    return {"anonymous": {}, "another key": {"Authorization": f"Bearer {new_key(db, 'mallory')}"},
            "owner": auth, "owner's other key": {"Authorization": f"Bearer {new_key(db, 'alice')}"},
            "admin": {"Authorization": f"Bearer {ADMIN_KEY}"}}


def _readers(name: str) -> bool:
    return name in ("owner", "owner's other key", "admin")


def test_the_view_its_events_and_the_profile_hide_diagnostics_from_all_but_owner_and_admin(client, auth, db, judged):
    sub_id, digest = judged
    for name, headers in _viewers(db, auth).items():
        view = client.get(f"/v1/submissions/{sub_id}", headers=headers)
        events = client.get(f"/v1/submissions/{sub_id}/events", headers=headers)
        profile = client.get(f"/v1/submissions/{sub_id}/profile", headers=headers)
        assert view.status_code == events.status_code == profile.status_code == 200, (name, view.text)
        body, prof = view.json(), profile.json()
        # Status and figures for everyone.
        assert body["status"] == "done" and body["verdict"]["status"] == "incorrect", name
        assert body["verdict"]["performance"]["speedups"] == {"eager": 2.0}
        assert body["verdict"]["trials"][0]["max_abs_error"] == 0.25 and body["verdict"]["stages"]["compile"] == 0.5
        assert prof["status"] == "ok" and prof["withheld"] is not _readers(name)
        everything = view.text + events.text + profile.text
        for bit in _private_bits(digest):
            assert (bit in everything) is _readers(name), (name, bit)
        assert body["diagnostics_withheld"] is not _readers(name)
        if _readers(name):
            assert body["text_sha256"] == body["source_sha256"] == digest
            assert body["verdict"]["source_sha256"] == JUDGED and body["verdict"]["compile_errors"][0]["code"] == SECRET
        else:
            assert body["text_sha256"] is body["source_sha256"] is body["verdict"]["source_sha256"] is None
            assert body["verdict"]["diagnosis"].startswith("incorrect: the diagnostics of a private submission")
            assert (body["verdict"]["compile_errors"], body["verdict"]["compile_log"], body["verdict"]["details"],
                    body["verdict"]["imports"], body["verdict"]["trials"][0]["message"]) == ([], None, {}, [], None)
            assert prof["profile"] is None and prof["text"] is None


def test_the_page_of_a_private_submission_shows_status_and_figures_only(client, auth, judged):
    sub_id, digest = judged
    html = client.get(f"/submissions/{sub_id}").text
    assert "incorrect" in html and "1.5" in html and "private to its submitter" in html
    for bit in [*_private_bits(digest), digest[:12], JUDGED[:12]]:
        assert bit not in html, bit
    # Once its submitter makes it public, anyone reads all of it.
    assert client.patch(f"/v1/submissions/{sub_id}", json={"public": True}, headers=auth).status_code == 200
    html = client.get(f"/submissions/{sub_id}").text
    assert SECRET in html and KERNEL in html and digest[:12] in html
    assert client.get(f"/v1/submissions/{sub_id}").json()["verdict"]["compile_errors"][0]["code"] == SECRET


def test_batch_results_give_a_private_sample_s_diagnosis_to_its_submitter_and_admin_only(client, auth, db):
    line = json.dumps({"task": "kl_div", "source": SOURCE})
    created = client.post("/v1/batches", content=line + "\n", headers={**auth, "Content-Type": "application/x-ndjson"})
    assert created.status_code == 202, created.text
    (claim,) = q.claim(db, "w", 1, 60)
    assert q.finish(db, claim.token, _verdict(claim.text_sha256), "w", q.RetryPolicy()) == "verdict"
    for name, headers in _viewers(db, auth).items():
        for fmt in ("jsonl", "csv"):
            rows = client.get(f"/v1/batches/{created.json()['id']}/results", params={"format": fmt}, headers=headers)
            assert rows.status_code == 200 and "incorrect" in rows.text, (name, rows.text)
            assert (SECRET in rows.text) is _readers(name), (name, fmt)


def test_the_leaderboard_gives_the_digest_of_public_code_only(client, db):
    private = judged_on_board(db, "ann", "m1", Status.CORRECT, 1.0)
    public = judged_on_board(db, "bob", "m2", Status.CORRECT, 2.0)
    with db.transaction() as session:
        session.get(Submission, public).public = True
    for _ in range(2):  # the second answer comes from the ranking's cache: the digests are hidden there too
        (device,) = client.get("/v1/leaderboard/kl_div", params={"by": "source"}).json()["devices"]
        digests = {e["submission_id"]: e["source_sha256"] for e in device["entries"]}
        assert digests[private] is None and digests[public] == crud.sha256("# bob 2.0")
        assert crud.sha256("# ann 1.0") not in json.dumps(device)
