"""The ranking rules (service/ranking.py) through GET /v1/leaderboard/{task}, on SQLite and PostgreSQL."""

from __future__ import annotations

from service.ranking import tie_ranks


def board(client, **params: object) -> dict:  # noqa: ANN001
    response = client.get("/v1/leaderboard/kl_div", params=params)
    assert response.status_code == 200, response.text
    (device,) = response.json()["devices"]
    return device


def test_the_same_code_under_three_model_names_is_one_entry(client, seeder):
    first = seeder.add("ann", "model-a", "KERNEL A", 1.000)
    seeder.add("bob", "model-b", "KERNEL A", 0.990)  # same code, luckier timing: still ann's first verdict
    seeder.add("cat", "model-c", "KERNEL A", 0.980)
    other = seeder.add("dan", "model-d", "KERNEL B", 1.200, iqr=0.001)
    for by in ("model", "submitter", "source"):
        entries = board(client, by=by)["entries"]
        assert [e["submission_id"] for e in entries] == [first, other], by
        assert entries[0]["copies"] == 3 and entries[0]["median_ms"] == 1.0
        assert [e["rank_label"] for e in entries] == ["1", "2"]


def test_overlapping_intervals_share_a_rank(client, seeder):
    a = seeder.add("ann", "m", "A", 1.000, iqr=0.010)   # 0.995-1.005
    b = seeder.add("bob", "m", "B", 1.004, iqr=0.010)   # 0.999-1.009 overlaps a
    c = seeder.add("cat", "m", "C", 1.100, iqr=0.010)   # clear of both
    d = seeder.add("dan", "m", "D", 1.103, iqr=0.010)   # overlaps c
    entries = board(client, sort="median_ms")["entries"]
    assert [(e["submission_id"], e["rank_label"], e["tied"]) for e in entries] == [
        (a, "=1", True), (b, "=1", True), (c, "=3", True), (d, "=3", True)]
    assert [e["rank_label"] for e in board(client)["entries"]] == ["=1", "=1", "=3", "=3"]  # same in speedup


def test_weaker_isolation_is_listed_apart_and_extra_shape_failures_on_request(client, seeder):
    ranked = seeder.add("ann", "m", "A", 1.0)
    weak = seeder.add("bob", "m", "B", 0.5, isolation="unshare")
    partial = seeder.add("cat", "m", "C", 0.8, extra=(2, 3))
    seeder.add("dan", "m", "D", 0.4, status="incorrect")
    device = board(client)
    assert [e["submission_id"] for e in device["entries"]] == [ranked]
    assert [(e["submission_id"], e["rank"], e["isolation"]) for e in device["unranked"]] == [(weak, None, "unshare")]
    with_partial = board(client, extra_failures="true")["entries"]
    assert [(e["submission_id"], e["extra_passed"], e["extra_total"]) for e in with_partial] == [
        (partial, 2, 3), (ranked, 3, 3)]


def test_pagination_counts_every_entry_and_ranks_stay_global(client, seeder):
    ids = [seeder.add(f"user{i}", "m", f"code {i}", 1.0 + i * 0.1, iqr=0.001) for i in range(5)]
    second_page = board(client, offset=2, limit=2)
    assert second_page["total"] == 5
    assert [(e["submission_id"], e["rank"]) for e in second_page["entries"]] == [(ids[2], 3), (ids[3], 4)]
    assert client.get("/v1/leaderboard/kl_div", params={"limit": 0}).status_code == 422
    assert client.get("/v1/leaderboard/kl_div", params={"by": "<script>"}).status_code == 422


def test_tie_groups_compare_with_the_head_not_the_neighbour():
    class Row:
        def __init__(self, median: float, half: float) -> None:
            self.median_ms, self.q25_ms, self.q75_ms = median, median - half, median + half
            self.speedup_eager = 1 / median

    # 1.00 +-0.02 overlaps 1.03 +-0.02 (rank =1); 1.06 overlaps 1.03 but not the head 1.00: it starts rank 3.
    rows = [Row(1.00, 0.02), Row(1.03, 0.02), Row(1.06, 0.02)]
    assert tie_ranks(rows, "median_ms") == [(1, True), (1, True), (3, False)]


def _pool(client, db, task: str = "kl_div"):  # noqa: ANN001, ANN202
    """The API app's pool of rankable verdicts for `task` (service/rankable.py), as the last request left it."""
    return client.app.state.ranking_cache.pools.get(task)


def test_a_new_verdict_is_read_alone_and_ranked_at_once(client, seeder, db):
    slow = seeder.add("ann", "m", "A", 1.0)
    seeder.add("bob", "m", "B", 0.5, status="incorrect")  # not rankable: the pool is unchanged by it
    assert [e["submission_id"] for e in board(client)["entries"]] == [slow]
    pool = _pool(client, db)
    assert pool.full_reads == 1 and len(pool.rows) == 1
    fast = seeder.add("cat", "m", "C", 0.5)
    assert [e["submission_id"] for e in board(client)["entries"]] == [fast, slow]
    assert pool.full_reads == 1 and len(pool.rows) == 2, "only the new verdict is read"
    page = client.get("/leaderboard/kl_div")
    assert page.status_code == 200 and fast in page.text
    assert pool.full_reads == 1


def test_a_smaller_id_committed_late_is_not_missed(client, seeder, db):
    """PostgreSQL ids are not commit-ordered: a verdict with an id below the largest one read can appear
    later. The pool sees its count differ and reads everything again."""
    from sqlalchemy import update

    from service.db.models import VerdictRow

    seeder.add("ann", "m", "A", 1.0)
    top = seeder.add("bob", "m", "B", 0.9)
    with db.transaction() as session:
        session.execute(update(VerdictRow).where(VerdictRow.submission_id == top).values(id=100))
    assert len(board(client)["entries"]) == 2
    pool = _pool(client, db)
    assert pool.version == (2, 100) and pool.full_reads == 1
    late = seeder.add("cat", "m", "C", 0.8)
    with db.transaction() as session:
        session.execute(update(VerdictRow).where(VerdictRow.submission_id == late).values(id=50))
    entries = board(client)["entries"]
    assert entries[0]["submission_id"] == late and len(entries) == 3
    assert pool.version == (3, 100) and pool.full_reads == 2


def test_home_board_api_and_cli_agree_on_best(client, seeder, monkeypatch):
    """One rule for "best" (service/ranking.py `best`): each code's first verdict, every extra shape passed.
    The fixture is one where the home page's old rule (the best of every re-judging) picks another kernel."""
    from typer.testing import CliRunner

    from service import ranking
    from service.cli import submissions
    from service.cli.main import app
    from service.client import JudgeClient
    from tests.service.conftest import InProcessTransport

    seeder.add("ann", "m", "KERNEL A", 1.0)  # first verdict of A: 3.90x
    seeder.add("bob", "m", "KERNEL A", 0.5)  # A again, a luckier draw: 7.80x under "best of every re-judging"
    head = seeder.add("cat", "m", "KERNEL B", 0.8)  # 4.88x: the board's head
    seeder.add("dan", "m", "KERNEL C", 0.6, extra=(2, 3))  # faster, but fails an extra shape
    device = "NVIDIA H100 80GB HBM3"

    api = board(client)
    assert api["entries"][0]["submission_id"] == head and api["entries"][0]["speedup_eager"] == 3.9 / 0.8
    assert board(client, sort="median_ms")["entries"][0]["median_ms"] == 0.8

    home = client.get("/").text
    row = home[home.index(f'<tr data-device="{device}">'):]
    row = row[:row.index("</tr>")]
    assert "4.88×" in row and "0.8000" in row, row
    assert "7.80×" not in row and "0.5000" not in row and "6.50×" not in row

    page = client.get("/leaderboard/kl_div").text
    ranked = page[page.index('<table class="ranking">'):]
    assert ranked.index(head) < min(ranked.index(s) for s in (api["entries"][1]["submission_id"],))
    assert 'id="best"' in page and "first verdict" in page
    pool = client.app.state.ranking_cache.pools.get("kl_div").snapshot
    assert ranking.best(pool, "kl_div", "speedup_eager")[device].submission_id == head
    assert [ms for _, ms in ranking.record_times(pool, device)] == [1.0, 0.8]  # not 0.5 (a re-judging), not 0.6

    monkeypatch.setattr(submissions, "client", lambda url, key: JudgeClient("http://testserver", "",
                                                                            transport=InProcessTransport(client)))
    monkeypatch.setenv("COLUMNS", "200")
    shown = CliRunner().invoke(app, ["leaderboard", "kl_div"])
    assert shown.exit_code == 0, shown.output
    first_row = next(line for line in shown.output.splitlines() if line.strip().startswith("│ 1 "))
    assert "cat" in first_row and head in first_row and "0.800" in first_row, shown.output
