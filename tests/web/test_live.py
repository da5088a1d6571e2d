"""A submission page follows a real judging live: real API and worker processes, a real sandboxed run.

The candidate has a Python syntax error: the real worker judges it in its compile stage (static checks, in
a second) without building or running anything, which keeps this test inside its CI budget; the page still
has to follow it from `queued` (no worker yet) to `done` through the event stream, then show the verdict.
A correct candidate would add the CPU baselines (torch.compile of the reference: minutes on a loaded
2-core machine) and a C++ build, and test nothing more about the page.
"""

from __future__ import annotations

import httpx
import pytest

from tests.service.conftest import new_key

CANDIDATE = "import torch\n\nclass ModelNew(torch.nn.Module:\n    pass\n"


@pytest.mark.parametrize("db_url", ["sqlite"], indirect=True)
def test_status_goes_live_to_done_with_the_verdict(db, spawn, live_api, browser):
    _, base = live_api()
    key = new_key(db, "live")
    sub = httpx.post(f"{base}/v1/submissions", headers={"Authorization": f"Bearer {key}"},
                     json={"task": "kl_div", "source": CANDIDATE, "model": "live-model", "public": True}).json()
    # public: the page is anonymous, and a private submission's diagnosis is its submitter's only
    context = browser.new_context()
    page = context.new_page()
    page.goto(f"{base}/submissions/{sub['id']}")
    assert page.locator("#status-text").inner_text() == "queued"  # no worker yet: nothing can move it
    assert page.locator("#status").get_attribute("data-status") == "queued"

    spawn("worker")
    # live.js updates the status from the event stream, then reloads once for the server-rendered verdict.
    page.locator(".badge").wait_for(timeout=120_000)
    assert page.locator("#status-text").inner_text() == "done"
    assert page.locator(".badge").inner_text() == "compile_error"
    assert "not valid Python (line 3: invalid syntax)" in page.locator("pre.diagnosis").inner_text()
    context.close()
