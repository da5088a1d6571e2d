"""Labels that say what was measured (issue 26, point 3), in a real browser against a real API process.

Each test seeds its own device model so tests stay apart on the module's one server. A device model named
"cpu:..." is judged on the torch device "cpu" at the task's CPU shape (tests/web/conftest.py::verdict, as the
sandbox does), so its pages must say that size, not the official one.
"""

from __future__ import annotations

import re

import httpx

from reference import get_task
from service.web.measured import CPU_NOTE

KL_DIV = get_task("kl_div")
CPU_SIZE = "×".join(map(str, KL_DIV.cpu_shape))         # 64×512
OFFICIAL = "×".join(map(str, KL_DIV.official_shape))    # 16384×16384


def weight(locator) -> int:  # noqa: ANN001
    return int(locator.evaluate("e => getComputedStyle(e).fontWeight"))


def test_a_cpu_verdict_says_its_shape_and_device_and_that_cpu_timings_are_not_a_ranking(site, page):
    base, seed = site
    cpu, gpu = "cpu:Labels", "GPU Labels"
    on_cpu = seed.add("ann", "m", "CPU KERNEL", 0.8, device=cpu, eager=1.0, compile_=0.9)
    on_gpu = seed.add("ann", "m", "GPU KERNEL", 0.73, device=gpu)

    page.goto(f"{base}/submissions/{on_cpu}")
    assert page.locator(".verdict .measured-at").inner_text() == f"{CPU_SIZE} on cpu"
    assert page.locator(".verdict p.cpu-note").inner_text() == CPU_NOTE
    timing = page.locator("section.verdict").inner_text().split("Correctness trials")[0]
    assert OFFICIAL not in timing

    page.goto(f"{base}/submissions/{on_gpu}")
    assert page.locator(".verdict .measured-at").inner_text() == f"{OFFICIAL} on {gpu}"
    assert page.locator("p.cpu-note").count() == 0

    page.goto(f"{base}/leaderboard/kl_div?device={cpu}")
    board = page.locator(f'section.board[data-device="{cpu}"]')
    assert board.locator(".measured-at").inner_text() == f"{CPU_SIZE} on cpu"
    assert board.locator("p.cpu-note").inner_text() == CPU_NOTE
    page.goto(f"{base}/leaderboard/kl_div?device={gpu}")
    assert page.locator(f'section.board[data-device="{gpu}"] .measured-at').inner_text() == f"{OFFICIAL} on {gpu}"
    assert page.locator("p.cpu-note").count() == 0

    page.goto(base + "/")
    task = page.locator("#task-kl_div")
    assert task.locator(f'tr[data-device="{cpu}"] td.measured-at').inner_text() == f"{CPU_SIZE} on cpu"
    assert task.locator(f'tr[data-device="{gpu}"] td.measured-at').inner_text() == OFFICIAL
    assert task.locator("p.cpu-note").inner_text() == CPU_NOTE
    assert page.locator("#task-cross_entropy p.cpu-note").count() == 0


def test_a_slowdown_is_shown_as_slower_and_never_bold_as_a_best(site, page):
    base, seed = site
    slow, fast = "GPU Slowdown", "GPU Speedup"
    seed.add("ann", "m", "SLOWDOWN", 5.0, device=slow, eager=1.0, compile_=0.9)   # 0.20x eager
    seed.add("ann", "m", "SPEEDUP", 0.5, device=fast, eager=1.0, compile_=0.9)    # 2.00x eager

    page.goto(base + "/")
    task = page.locator("#task-kl_div")
    slow_cell = task.locator(f'tr[data-device="{slow}"] td.best')
    fast_cell = task.locator(f'tr[data-device="{fast}"] td.best')
    assert slow_cell.inner_text() == "0.20× (slower)"
    assert fast_cell.inner_text() == "2.00×"
    assert weight(slow_cell.locator(".speedup")) < 600 <= weight(fast_cell.locator(".speedup"))
    assert "best" not in task.locator("thead").inner_text().lower()

    page.goto(f"{base}/leaderboard/kl_div?device={slow}")
    cell = page.locator("table.ranking td[data-label='vs eager']")
    assert cell.inner_text() == "0.20× (slower)" and weight(cell.locator(".speedup")) < 600
    page.goto(f"{base}/leaderboard/kl_div?device={fast}")
    assert weight(page.locator("table.ranking td[data-label='vs eager'] .speedup")) >= 600


def test_entries_whose_iqrs_overlap_carry_a_tie_marker_that_says_why(site, page):
    base, seed = site
    gpu = "GPU Ties"
    a = seed.add("ann", "m", "TIE A", 1.000, device=gpu, iqr=0.010)   # 0.995-1.005
    b = seed.add("bob", "m", "TIE B", 1.004, device=gpu, iqr=0.010)   # 0.999-1.009: overlaps a
    c = seed.add("cat", "m", "TIE C", 1.200, device=gpu, iqr=0.002)   # clear of both
    page.goto(f"{base}/leaderboard/kl_div?device={gpu}")
    rows = page.locator("table.ranking tbody tr")
    assert [rows.nth(i).locator("td.who a").get_attribute("href") for i in range(3)] == [
        f"/submissions/{s}" for s in (a, b, c)]
    assert [rows.nth(i).locator(".rank-label").inner_text() for i in range(3)] == ["=1", "=1", "3"]
    markers = [rows.nth(i).locator("abbr.tie") for i in range(3)]
    assert [m.count() for m in markers] == [1, 1, 0]
    assert markers[0].inner_text().lower() == "tie"
    assert "inside the measurement noise" in markers[0].get_attribute("title")


def test_one_code_sent_three_times_is_one_distinct_kernel(site, page):
    base, seed = site
    gpu = "GPU Distinct"
    for who in ("ann", "bob", "cat"):
        seed.add(who, f"model-{who}", "THE SAME KERNEL", 1.0, device=gpu)
    seed.add("dan", "model-d", "ANOTHER KERNEL", 1.1, device=gpu)
    page.goto(base + "/")
    assert page.locator(f'#task-kl_div tr[data-device="{gpu}"] td.correct').inner_text() == "4 (2 distinct kernels)"
    page.goto(f"{base}/leaderboard/kl_div?device={gpu}")
    assert "4 correct (2 distinct kernels)" in page.locator("section.board figcaption").first.inner_text()


def test_each_timing_column_is_explained_where_it_appears(site):
    base, seed = site
    gpu = "GPU Legend"
    sub = seed.add("ann", "m", "LEGEND", 0.8, device=gpu)
    board = httpx.get(f"{base}/leaderboard/kl_div", params={"device": gpu}).text
    titles = dict((text, title) for title, text in re.findall(r'<th class="num"><abbr title="([^"]+)">([^<]+)</abbr>',
                                                                board))
    assert "minimal bytes" in titles["% SoL"] and "memory bandwidth" in titles["% SoL"]
    assert "eager" in titles["vs eager"] and "torch.compile" in titles["vs compile"]
    assert "interquartile range" in titles["median ms (IQR)"]
    legend = board[board.index('<dl class="legend">'):]
    for term in ("median ms (IQR)", "vs eager", "vs compile", "% SoL", "=2, tie"):
        assert f"<dt>{term}</dt>" in legend, term
    detail = httpx.get(f"{base}/submissions/{sub}").text
    sol = r'<dt><abbr title="percent of speed-of-light: the task&#39;s minimal bytes[^"]*">% of speed-of-light'
    assert re.search(sol, detail)
