"""An anonymous visitor's view of kernel sources, in a real browser (Debian's Chromium through Playwright).

The pages have no login, so every visitor is anonymous: a submission page shows its verdict always and its source
only where service/visibility.py lets anyone read it (its submitter made it public, or the operator's
JUDGE_SOURCES_PUBLIC_AFTER published it). The leaderboard still links every ranked entry to its verdict page.
"""

from __future__ import annotations

import datetime as dt
import os
import sys
from collections.abc import Iterator

import httpx
import pytest

from service.db.migrate import upgrade
from service.db.models import Submission
from service.db.session import Database
from tests.service.conftest import ADMIN_KEY, Proc, free_port, wait_api
from tests.web.conftest import T0, Seeder

GPU = "GPU Visibility"
PUBLISHED_AT = T0 + dt.timedelta(days=1)
"""The operator's date in `published_site`: after every seeded submission (T0 + n minutes), before today."""


def code(marker: str) -> str:
    return f"# {marker}\nclass ModelNew:\n    pass\n"


def source_shown(page) -> bool:  # noqa: ANN001
    return page.locator("section.code .source").count() > 0


@pytest.fixture(scope="module")
def published_site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Seeder]]:
    """A second API process whose operator set JUDGE_SOURCES_PUBLIC_AFTER (a competition that has ended)."""
    root = tmp_path_factory.mktemp("published")
    url = f"sqlite:///{root / 'judge.db'}"
    upgrade(url)
    database = Database(url)
    port = free_port()
    env = {**os.environ, "DATABASE_URL": url, "JUDGE_ADMIN_KEY": ADMIN_KEY,
           "JUDGE_SOURCES_PUBLIC_AFTER": PUBLISHED_AT.isoformat() + "Z"}
    proc = Proc([sys.executable, "-m", "uvicorn", "service.main:create_app", "--factory", "--host", "127.0.0.1",
                 "--port", str(port)], env, root / "api.log")
    base = f"http://127.0.0.1:{port}"
    try:
        wait_api(proc, base)
        yield base, Seeder(database)
    finally:
        proc.close()
        database.dispose()


def test_a_private_source_is_hidden_and_a_public_one_shown_from_the_leaderboard(site, page):
    base, seed = site
    private = seed.add("ann", "model-a", code("PRIVATE-KERNEL"), 1.0, device=GPU)
    public = seed.add("bob", "model-b", code("PUBLIC-KERNEL"), 2.0, device=GPU, public=True)

    page.goto(f"{base}/leaderboard/kl_div?device={GPU}")
    rows = page.locator(f'section.board[data-device="{GPU}"] table.ranking tbody tr')
    assert rows.count() == 2
    rows.nth(0).locator("td.who a").click()  # the private entry ranks first: the link still leads to its verdict
    page.wait_for_url(f"**/submissions/{private}")
    assert page.locator(".badge").inner_text() == "correct"
    assert page.locator("section.verdict dl.meta").first.is_visible()  # timing: part of the public verdict
    hidden = page.locator("section.code.private")
    assert hidden.is_visible() and "private to its submitter" in hidden.inner_text()
    assert f"PATCH /v1/submissions/{private}" in hidden.inner_text()
    assert not source_shown(page) and "PRIVATE-KERNEL" not in page.content()

    page.go_back()
    assert "PRIVATE-KERNEL" not in page.content()
    assert "PRIVATE-KERNEL" not in httpx.get(f"{base}/v1/leaderboard/kl_div", params={"device": GPU}).text
    page.locator(f'section.board[data-device="{GPU}"] table.ranking tbody tr').nth(1).locator("td.who a").click()
    page.wait_for_url(f"**/submissions/{public}")
    assert source_shown(page) and "PUBLIC-KERNEL" in page.locator("section.code").inner_text()
    assert "its submitter made it public" in page.locator("section.code p.access").inner_text()


def test_a_source_made_public_later_appears_on_reload(site, page):
    base, seed = site
    sub = seed.add("cat", "model-c", code("LATER-KERNEL"), 1.5, device="GPU Later")
    page.goto(f"{base}/submissions/{sub}")
    assert not source_shown(page)
    answer = httpx.patch(f"{base}/v1/submissions/{sub}", json={"public": True},
                         headers={"Authorization": f"Bearer {ADMIN_KEY}"})
    assert answer.status_code == 200 and answer.json()["source_public"] is True
    page.reload()
    assert source_shown(page) and "LATER-KERNEL" in page.locator("section.code").inner_text()
    assert httpx.get(f"{base}/v1/submissions/{sub}/source").json()["source"] == code("LATER-KERNEL")


def test_after_the_operators_date_the_sources_sent_before_it_are_shown(published_site, page):
    base, seed = published_site
    during = seed.add("dan", "model-d", code("DURING-KERNEL"), 1.0, device=GPU)
    after = seed.add("eve", "model-e", code("AFTER-KERNEL"), 0.9, device=GPU)
    with seed.db.transaction() as session:  # sent after the competition ended
        session.get(Submission, after).created_at = PUBLISHED_AT + dt.timedelta(hours=1)

    page.goto(f"{base}/submissions/{during}")
    assert source_shown(page) and "DURING-KERNEL" in page.locator("section.code").inner_text()
    assert "published every source sent before 2026-11-21 12:00 UTC" in page.locator("section.code").inner_text()

    page.goto(f"{base}/leaderboard/kl_div?device={GPU}")
    page.locator(f'section.board[data-device="{GPU}"] td.who a', has_text="eve").click()
    page.wait_for_url(f"**/submissions/{after}")
    assert not source_shown(page) and "AFTER-KERNEL" not in page.content()
    assert page.locator(".badge").inner_text() == "correct"
