"""A batch page to drill into (issue 26, point 4): its samples filtered by outcome, each leading to its
submission, metrics labelled in words, readable plots, and a cancelled batch that says so.

Real browser (Debian's Chromium through Playwright) against the module's real API process; HTTP where a
page's text is enough.
"""

from __future__ import annotations

import datetime as dt
import re

import httpx

from reference import get_task
from sandbox.verdict import Status
from service.db.models import Batch
from service.queue.states import JobState
from service.web.measured import CPU_NOTE
from service.web.samples import PAGE_SIZE
from tests.web.conftest import T0

CPU = "cpu:Batch"
CPU_SIZE = "×".join(map(str, get_task("kl_div").cpu_shape))


def test_filter_the_samples_by_outcome_and_click_through_to_a_submission(site, page):
    base, seed = site
    batch = seed.batch("ann", "drill")
    first = seed.add("ann", "bm", "D1", 0.5, device=CPU, batch=batch, eager=1.0, compile_=0.6, sample_index=0)
    seed.unjudged(batch, "bm", "D1", duplicate_of=first)                                   # line 2: same code
    wrong = seed.add("ann", "bm", "D3", None, device=CPU, batch=batch, status=Status.INCORRECT.value, sample_index=2)
    seed.add("ann", "bm", "D4", None, device=CPU, batch=batch, status=Status.COMPILE_ERROR.value, sample_index=3)
    seed.unjudged(batch, "bm", "D5")                                                       # line 5: queued

    page.goto(f"{base}/batches/{batch.id}")
    rows = page.locator("table.samples tbody tr")
    assert [rows.nth(i).get_attribute("data-line") for i in range(rows.count())] == ["1", "2", "3", "4", "5"]
    assert [rows.nth(i).locator("td.outcome span").first.inner_text() for i in range(5)] == [
        "correct", "correct", "incorrect", "compile_error", "pending"]
    assert "same code as line 1" in rows.nth(1).inner_text()
    assert page.locator(".correct-count").inner_text().startswith("2 correct (1 distinct kernel) of 4 judged")
    assert page.locator(".metrics .measured-at").inner_text() == f"{CPU_SIZE} on cpu"
    assert page.locator(".metrics p.cpu-note").inner_text() == CPU_NOTE

    page.locator("nav.filters a", has_text="incorrect").click()
    page.wait_for_url(f"**/batches/{batch.id}?status=incorrect")
    assert rows.count() == 1 and rows.first.get_attribute("data-line") == "3"
    assert page.locator("nav.filters a.current").inner_text() == "incorrect 1"
    rows.first.locator("a.open").click()
    page.wait_for_url(f"**/submissions/{wrong}")
    assert page.locator(".badge").inner_text() == "incorrect"
    assert page.locator("a.batch-link").get_attribute("href") == f"/batches/{batch.id}"

    page.goto(f"{base}/batches/{batch.id}?status=pending")
    assert rows.count() == 1 and rows.first.get_attribute("data-line") == "5"
    page.goto(f"{base}/batches/{batch.id}?status=correct")
    assert [rows.nth(i).get_attribute("data-line") for i in range(rows.count())] == ["1", "2"]
    assert httpx.get(f"{base}/batches/{batch.id}", params={"status": "<b>x</b>"}).status_code == 404


def test_a_large_batch_is_paged_and_the_filter_is_kept_across_pages(site):
    base, seed = site
    batch = seed.batch("ann", "big")
    judged = seed.add("ann", "bm", "P0", 0.5, device=CPU, batch=batch, eager=1.0, compile_=0.6)
    for i in range(PAGE_SIZE + 1):
        seed.unjudged(batch, "bm", f"P{i + 1}")
    url = f"{base}/batches/{batch.id}"

    def lines(html: str) -> list[int]:
        return [int(n) for n in re.findall(r'<tr data-line="(\d+)">', html)]

    first = httpx.get(url).text
    assert lines(first) == list(range(1, PAGE_SIZE + 1)) and 'rel="next" href="?page=2#samples"' in first
    second = httpx.get(url, params={"page": 2}).text
    assert lines(second) == [PAGE_SIZE + 1, PAGE_SIZE + 2] and 'rel="prev"' in second and 'rel="next"' not in second
    pending = httpx.get(url, params={"status": "pending", "page": 2}).text
    assert lines(pending) == [PAGE_SIZE + 2]
    assert 'rel="prev" href="?status=pending&amp;page=1#samples"' in pending
    assert f'href="/submissions/{judged}"' in first


def test_a_cancelled_batch_says_when_and_how_many_samples_were_judged_before(site, page):
    base, seed = site
    batch = seed.batch("ann", "stopped")
    seed.add("ann", "bm", "C1", 0.5, device=CPU, batch=batch, eager=1.0, compile_=0.6)   # judged before the cancel
    at = T0 + dt.timedelta(minutes=seed.n, seconds=50)  # after that verdict (recorded 40 s after its submission)
    with seed.db.transaction() as session:
        session.get(Batch, batch.id).cancelled_at = at
    seed.add("ann", "bm", "C2", 0.6, device=CPU, batch=batch, eager=1.0, compile_=0.6)   # was running: judged after
    for code in ("C3", "C4"):
        seed.unjudged(batch, "bm", code, JobState.CANCELLED)

    page.goto(f"{base}/batches/{batch.id}")
    state = page.locator("#batch-state")
    assert state.inner_text() == "cancelled" and "state-cancelled" in state.get_attribute("class")
    assert page.locator(".cancelled-note").inner_text() == (
        f"on {at:%Y-%m-%d %H:%M} UTC, after 1 of 4 samples were judged; 1 more, already running, were judged after; "
        "2 never ran.")
    page.locator("nav.filters a", has_text="cancelled").click()
    page.wait_for_url("**status=cancelled")
    assert page.locator("table.samples tbody tr").count() == 2


def test_the_metrics_are_named_in_words_and_the_plots_are_readable(site, page):
    base, seed = site
    batch = seed.batch("ann", "words")
    seed.add("ann", "bm", "W1", 0.5, device=CPU, batch=batch, eager=1.0, compile_=0.6)
    seed.add("ann", "bm", "W2", None, device=CPU, batch=batch, status=Status.INCORRECT.value)
    page.goto(f"{base}/batches/{batch.id}")
    legend = dict(zip(page.locator(".metrics dl.legend dt").all_inner_texts(),
                      page.locator(".metrics dl.legend dd").all_inner_texts()))
    assert "share of judged samples whose verdict is correct" in legend["correct %"]
    assert "unbiased estimator" in legend["pass@k"] and "same prompt" in legend["pass@k"]
    assert "expected best speedup among k samples" in legend["best-of-k"]
    assert page.locator(".correct-rate").inner_text() == "50.0%"

    fast_eager = page.locator("figure", has_text="fast_p vs eager PyTorch").locator("svg.plot")
    texts = fast_eager.locator("text").all_text_contents()
    assert {"correct", "> 1×", "> 1.5×", "> 2×"} <= set(texts)
    assert "share of judged samples" in texts
    assert "correct, and faster than eager PyTorch by more than the threshold" in texts
    # Rendered size of the axis text: its font size in SVG units, scaled by the plot's width on screen.
    px = page.evaluate("""() => {
        const svg = document.querySelector('svg.plot'), tick = svg.querySelector('text.tick');
        const scale = svg.getBoundingClientRect().width / svg.viewBox.baseVal.width;
        return parseFloat(getComputedStyle(tick).fontSize) * scale;
    }""")
    assert px >= 11, f"axis text {px:.1f} px on a 1280 px wide page"


def test_the_batch_and_board_queries_on_both_databases(client, seeder):
    """The page's SQL (JSON paths for the shape, grouped counts, FILTER clauses) on SQLite and PostgreSQL."""
    batch = seeder.batch("ann", "both", cancelled_at=T0 + dt.timedelta(days=1))
    first = seeder.add("ann", "bm", "Q1", 0.5, device=CPU, batch=batch, eager=1.0, compile_=0.6)
    seeder.unjudged(batch, "bm", "Q1", duplicate_of=first)
    seeder.add("ann", "bm", "Q3", 0.4, device="GPU Both", batch=batch)
    seeder.unjudged(batch, "bm", "Q4", JobState.CANCELLED)

    html = client.get(f"/batches/{batch.id}").text
    assert re.search(r'class="measured-at">16384×16384 on GPU Both; ' + CPU_SIZE + " on cpu</strong>", html)
    assert "3 correct (2 distinct kernels) of 3 judged samples" in html
    assert "after 3 of 4 samples were judged; 1 never ran." in html
    assert re.findall(r'<tr data-line="(\d+)">', client.get(f"/batches/{batch.id}?status=cancelled").text) == ["4"]

    board = client.get("/leaderboard/kl_div", params={"device": CPU}).text
    assert f'class="measured-at">{CPU_SIZE} on cpu</strong>' in board and CPU_NOTE in board
    home = client.get("/").text
    assert re.search(rf'<tr data-device="{CPU}">.*?<td class="measured-at">{CPU_SIZE} on cpu</td>', home, re.S)
