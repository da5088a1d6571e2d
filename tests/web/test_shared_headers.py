"""The shared precompiled headers built in the background when `serve` starts (service/worker/headers.py), and
their progress where a user waits: /readyz's detail, `submit --wait`'s lines and the submission page.

A real `serve` (API and worker), warming one flag set (-O1: no other test builds it, so its header is not in the
session's shared cache yet). The candidate asks for -O1 too and has a C++ compile error: its build waits for the
header the worker is building (it never builds it a second time), then fails in seconds; no baseline or timing
run is needed to show the wait.
"""

from __future__ import annotations

import os
import subprocess
import sys

import httpx

from tests.service.conftest import ADMIN_KEY, CORPUS, ROOT, Proc, free_port, wait_api, wait_for

FLAGS = "-O1"
CANDIDATE = (CORPUS / "cpu" / "compile_error.py").read_text().replace(
    "verbose=False)", f'extra_cflags=["{FLAGS}"], verbose=False)')


def shared_headers(base: str) -> dict | None:
    ready = httpx.get(f"{base}/readyz", timeout=10)
    assert ready.status_code == 200, ready.text  # building headers never makes the service unready
    return ready.json()["detail"].get("shared_headers")


def test_serve_builds_the_shared_headers_in_the_background_and_says_so(tmp_path, judge_dirs, browser):
    assert f'extra_cflags=["{FLAGS}"]' in CANDIDATE
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    env = {**os.environ, **judge_dirs, "DATABASE_URL": f"sqlite:///{tmp_path / 'judge.db'}",
           "JUDGE_ADMIN_KEY": ADMIN_KEY, "JUDGE_WARM_HEADERS": FLAGS, "JUDGE_DEVICES": "cpu",
           "JUDGE_COMPILE_WORKERS": "1", "JUDGE_POLL_S": "0.05", "JUDGE_LEASE_S": "4", "JUDGE_SSE_POLL_S": "0.2"}
    serve = Proc([sys.executable, "-m", "service.cli.main", "serve", "--port", str(port)], env,
                 tmp_path / "serve.log")
    try:
        wait_api(serve, base)
        building = wait_for(lambda: shared_headers(base), 120, "the worker's header build in /readyz")
        assert building["state"] == "building" and building["building"] == FLAGS, building
        assert (building["ready"], building["total"]) == (0, 1) and building["building_s"] >= 0
        assert building["variants"] == [{"flags": FLAGS, "state": "building", "seconds": None}]

        key = httpx.post(f"{base}/v1/keys", headers={"Authorization": f"Bearer {ADMIN_KEY}"},
                         json={"submitter": "ann"}).json()["key"]
        candidate = tmp_path / "kernel.py"
        candidate.write_text(CANDIDATE)
        submit = subprocess.Popen([sys.executable, "-m", "service.cli.main", "submit", str(candidate), "--task",
                                   "kl_div", "--wait", "--url", base, "--key", key], cwd=ROOT, text=True,
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, env={**os.environ, "COLUMNS": "200"})
        try:
            submission_id = submit.stdout.readline().strip()
            page = browser.new_context().new_page()
            page.goto(f"{base}/submissions/{submission_id}")
            note = page.locator("#shared-headers")
            assert note.is_visible(), page.content()
            assert f"building {FLAGS} for" in note.inner_text() and "0 of 1 ready" in note.inner_text()
            view = httpx.get(f"{base}/v1/submissions/{submission_id}").json()
            assert view["shared_headers"]["building"] == FLAGS and view["status"] != "done"

            out, err = submit.communicate(timeout=900)
        finally:
            if submit.poll() is None:
                submit.kill()
        assert submit.returncode == 1, err  # judged, not correct
        assert out.splitlines()[-1].startswith("compile_error: "), out
        assert f"shared precompiled headers: building {FLAGS} for" in err, err

        done = shared_headers(base)
        assert done["state"] == "done" and (done["ready"], done["total"]) == (1, 1) and done["building"] is None
        assert done["variants"][0]["state"] == "ready" and done["variants"][0]["seconds"] > 0
        # The page has followed the judging to its verdict; the note is gone with the wait.
        page.locator(".badge").wait_for(timeout=60_000)
        assert page.locator(".badge").inner_text() == "compile_error"
        assert not page.locator("#shared-headers").is_visible()
        assert httpx.get(f"{base}/v1/submissions/{submission_id}").json()["shared_headers"] is None
        page.context.close()
    finally:
        serve.close()
