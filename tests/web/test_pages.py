"""The pages in a real browser (Debian's Chromium through Playwright) against a real API process.

One server and one browser for the whole module; each test seeds its own task/device so tests stay apart.
"""

from __future__ import annotations

import json

import httpx

from sandbox.verdict import Status

XSS = '<script>alert("xss")</script><img src=x onerror=alert(1)>'


def test_home_and_leaderboard_show_the_seeded_ranking(site, page):
    base, seed = site
    gpu = "GPU Rank"
    slow = seed.add("ann", "model-a", "SLOW", 2.0, device=gpu)
    fast = seed.add("bob", "model-b", "FAST", 1.0, device=gpu)
    seed.add("cat", "model-c", "FAST", 0.9, device=gpu)  # bob's code again: folded into bob's entry
    weak = seed.add("eve", "model-e", "WEAK", 0.5, device=gpu, isolation="none")

    page.goto(base + "/")
    assert page.locator("#task-kl_div").get_by_role("link", name=gpu).is_visible()

    response = page.goto(f"{base}/leaderboard/kl_div?device={gpu}")
    assert "script-src 'self'" in response.headers["content-security-policy"]
    board = page.locator(f'section.board[data-device="{gpu}"]')
    rows = board.locator("table.ranking:not(.unranked) tbody tr")
    assert rows.count() == 2
    assert rows.nth(0).locator("td.rank").inner_text() == "1"
    assert rows.nth(0).locator("td.who a").get_attribute("href") == f"/submissions/{fast}"
    assert "sent 2×" in rows.nth(0).inner_text()
    assert rows.nth(1).locator("td.who a").get_attribute("href") == f"/submissions/{slow}"
    unranked = board.locator("table.unranked tbody tr")
    assert unranked.count() == 1 and unranked.locator("a").get_attribute("href") == f"/submissions/{weak}"
    assert board.locator("svg.plot").count() == 2  # speedup histogram and best time over time


def test_filters_change_the_ranking(site, page):
    base, seed = site
    gpu = "GPU Filters"
    seed.add("ann", "shared-model", "F1", 1.0, device=gpu)
    seed.add("bob", "shared-model", "F2", 1.5, device=gpu)
    partial = seed.add("cat", "solo-model", "F3", 0.5, device=gpu, extra=(1, 3))
    seed.add("dan", None, "F4", 1.2, device="GPU Other")

    page.goto(f"{base}/leaderboard/kl_div")
    page.select_option("select[name=device]", gpu)
    page.select_option("select[name=by]", "model")
    page.click("form.filters button")
    page.wait_for_url("**by=model**")
    rows = page.locator("section.board table.ranking tbody tr")
    assert page.locator("section.board").count() == 1
    assert [rows.nth(i).locator("td.who a").inner_text() for i in range(rows.count())] == ["shared-model"]

    page.check("input[name=extra_failures]")
    page.click("form.filters button")
    page.wait_for_url("**extra_failures=true**")
    assert rows.count() == 2
    assert rows.nth(0).locator("td.who a").get_attribute("href") == f"/submissions/{partial}"
    assert rows.nth(0).locator("td[data-label='extra shapes']").inner_text() == "1/3"


def test_a_compile_error_page_leads_with_the_compiler_errors(site, page):
    base, seed = site
    sub = seed.add("ann", "model-a", "broken", None, status=Status.COMPILE_ERROR.value,
                   diagnosis='the extension failed to compile:\ncuda.cu(46): identifier "scale_factor" is undefined',
                   details={"stage": "compile", "errors": ['cuda.cu(46): identifier "scale_factor" is undefined']},
                   compile_log="[1/3] nvcc ...\nFAILED\n" * 5, public=True)  # a private one's errors: its submitter's
    page.goto(f"{base}/submissions/{sub}")
    assert page.locator(".badge").inner_text() == "compile_error"
    errors = page.locator("pre.errors")
    assert 'identifier "scale_factor" is undefined' in errors.inner_text()
    # Diagnosis first: the errors come before the (collapsed) full log and before the source.
    order = page.evaluate("""() => ['pre.diagnosis', 'pre.errors', 'pre.log', 'section.code']
        .map(s => document.querySelector(s).getBoundingClientRect().top)""")
    assert order == sorted(order)
    assert not page.locator("pre.log").is_visible()


def test_hostile_source_and_metadata_render_as_text(site, page):
    base, seed = site
    source = f"# {XSS}\nclass ModelNew:  # </pre></code>{XSS}\n    pass\n"
    sub = seed.add(XSS, XSS, source, 1.0, device="GPU XSS", tags=[XSS], diagnosis=f"correct {XSS}", public=True)
    page.goto(f"{base}/submissions/{sub}")
    assert page.locator("dd.model").inner_text().startswith(XSS)
    assert page.locator("dd.submitter").inner_text() == XSS
    assert XSS in page.locator("dd.tags").inner_text()
    assert XSS in page.locator("section.code").inner_text()
    assert page.locator("script:not([src])").count() == 0 and page.locator("img[src=x]").count() == 0
    page.goto(f"{base}/leaderboard/kl_div?device=GPU+XSS&by=model")
    assert page.locator("td.who a").inner_text() == XSS
    assert page.locator("img[src=x]").count() == 0
    assert page.dialogs == []


def test_pages_fit_a_phone_and_read_without_javascript(site, browser):
    base, seed = site
    sub = seed.add("a-submitter-with-a-rather-long-name", "model-with-a-long-name-7b-instruct", "PHONE", 0.8,
                   device="GPU Phone")
    batch = seed.batch("a-submitter-with-a-rather-long-name", "a batch on a phone")
    on_cpu = seed.add("a-submitter-with-a-rather-long-name", "m", "PHONE CPU", 0.8, device="cpu:Phone", batch=batch)
    context = browser.new_context(viewport={"width": 390, "height": 844}, java_script_enabled=False,
                                  is_mobile=True, device_scale_factor=2)
    page = context.new_page()
    for path in ("/leaderboard/kl_div?device=GPU+Phone", "/leaderboard/kl_div?device=cpu:Phone", f"/submissions/{sub}",
                 f"/submissions/{on_cpu}", f"/batches/{batch.id}", "/"):
        page.goto(base + path)
        # Nothing wider than the screen except inside elements that scroll on their own (code, tables on /).
        assert page.evaluate("document.documentElement.scrollWidth") <= 390, path
    page.goto(base + "/leaderboard/kl_div?device=GPU+Phone")
    assert page.locator("td.rank").first.is_visible() and page.locator("td.who a").inner_text().startswith("a-sub")
    context.close()


def test_the_json_route_gives_the_same_ranking_as_the_page(site):
    base, seed = site
    a = seed.add("ann", "m", "J1", 1.0, device="GPU Json", iqr=0.01)
    b = seed.add("bob", "m", "J2", 1.004, device="GPU Json", iqr=0.01)
    body = httpx.get(f"{base}/v1/leaderboard/kl_div", params={"device": "GPU Json"}).json()
    entries = body["devices"][0]["entries"]
    assert [(e["submission_id"], e["rank_label"]) for e in entries] == [(a, "=1"), (b, "=1")]
    html = httpx.get(f"{base}/leaderboard/kl_div", params={"device": "GPU Json"}).text
    assert html.index(a) < html.index(b) and html.count(">=1<") == 2
    assert json.dumps(body)  # JSON-serialisable as sent


def test_a_batch_page_shows_progress_and_fast_p(site, page):
    from service.db.models import Batch, new_id

    base, seed = site
    with seed.db.transaction() as session:
        owner = seed.key(session, "ann")
        batch = Batch(id=new_id(), name="sweep <b>7</b>", api_key_id=owner.id, submitter=owner.submitter,
                      tags=[], total=0, duplicates=0, rejected=[])
        session.add(batch)
    seed.add("ann", "bm", "B1", 0.5, batch=batch, eager=1.0, compile_=0.6)   # 2x eager, 1.2x compile
    seed.add("ann", "bm", "B2", None, batch=batch, status=Status.INCORRECT.value)
    page.goto(f"{base}/batches/{batch.id}")
    assert page.locator("h1 .batch-name").inner_text() == "sweep <b>7</b>"
    assert page.locator("#batch-state").inner_text() == "done"
    assert page.locator("progress").get_attribute("value") == "1.0"
    fast_eager = page.locator("table.metrics tr", has_text="eager").first.locator("td.num")
    # fast_p vs eager at p = 0, 1, 1.5, 2: one correct sample of two, 2x faster (fast_2 is strictly faster).
    assert fast_eager.all_inner_texts() == ["0.500", "0.500", "0.500", "0.000"]
    assert page.locator("figure svg.plot").count() == 3
    assert page.goto(f"{base}/batches/nope").status == 404


def test_redoc_renders_every_operation_without_a_reference_error(site, page):
    """ReDoc resolves the whole document in the browser and stops at the first broken `$ref` ("Invalid reference
    token: $defs" before the route schemas were inlined)."""
    base, _ = site
    page.goto(base + "/redoc")
    page.wait_for_function("document.body.innerText.includes('Per-sample results, streamed as JSONL or CSV')",
                           timeout=60_000)
    content = page.content()
    assert "Invalid reference token" not in content and "Something went wrong" not in content
