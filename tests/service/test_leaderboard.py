"""GET /v1/leaderboard/{task}: best correct submission per submitter or model, per device; sorting; ties."""

from __future__ import annotations


from sandbox.verdict import Environment, Performance, Status, TimingStats, Verdict
from service import crud
from service.api.schemas import SubmissionCreate

from service.db.session import Database
from service.queue import claims as q
from tests.service.conftest import InProcessTransport


def judged(db: Database, who: str, model: str, status: Status, median_ms: float | None, device: str = "H100",
           eager_ms: float = 4.0, compile_ms: float = 0.8, unranked: str | None = None) -> str:
    with db.transaction() as session:
        key = crud.create_key(session, who)[0]
        source = f"# {who} {median_ms}"
        sub = crud.create_submission(session, key, SubmissionCreate(task="kl_div", source=source,
                                                                    model=model)).submission
    (claim,) = q.claim(db, "w", 1, 60)
    perf = None
    if median_ms is not None:
        stats = lambda ms: TimingStats(median_ms=ms, q25_ms=ms, q75_ms=ms, min_ms=ms, mean_ms=ms, reps=10)  # noqa: E731
        perf = Performance(candidate=stats(median_ms),
                           baselines={"eager": stats(eager_ms), "compile": stats(compile_ms)},
                           speedups={"eager": eager_ms / median_ms, "compile": compile_ms / median_ms},
                           min_bytes=2 << 30, bandwidth_bytes_per_s=3e12,
                           speed_of_light_fraction=(2 << 30) / 3e12 * 1e3 / median_ms)
    verdict = Verdict(status=status, diagnosis="x", task="kl_div", device="cuda:0", source_sha256=crud.sha256(source),
                      performance=perf, environment=Environment(device="cuda:0", device_name=device, torch="2",
                                                                python="3", isolation="bwrap"),
                      ranked=unranked is None, unranked_reason=unranked)
    assert q.finish(db, claim.token, verdict, "w", q.RetryPolicy()) == "verdict"
    return sub.id


def test_best_per_submitter_per_device_sorted_by_speedup(client, db):
    a_slow = judged(db, "ann", "m1", Status.CORRECT, 2.0)
    a_fast = judged(db, "ann", "m1", Status.CORRECT, 1.0)
    b = judged(db, "bob", "m2", Status.CORRECT, 1.5)
    judged(db, "cat", "m3", Status.INCORRECT, 0.1)  # wrong answers are never ranked
    judged(db, "dan", "m4", Status.CORRECT, None)  # correct but not timed (compile-only): not ranked
    other = judged(db, "bob", "m2", Status.CORRECT, 3.0, device="A100")

    board = client.get("/v1/leaderboard/kl_div").json()
    by_device = {d["device_name"]: d["entries"] for d in board["devices"]}
    assert set(by_device) == {"H100", "A100"}
    ranked = [(e["rank"], e["name"], e["submission_id"]) for e in by_device["H100"]]
    assert ranked == [(1, "ann", a_fast), (2, "bob", b)]
    assert by_device["H100"][0]["speedup_eager"] == 4.0
    assert [e["submission_id"] for e in by_device["A100"]] == [other]
    assert a_slow not in [e["submission_id"] for e in by_device["H100"]]

    slowest_first = client.get("/v1/leaderboard/kl_div?sort=median_ms&device=H100").json()
    assert [e["median_ms"] for e in slowest_first["devices"][0]["entries"]] == [1.0, 1.5]


def test_group_by_model_and_ties_go_to_the_earlier_submission(client, db):
    first = judged(db, "ann", "same-model", Status.CORRECT, 1.0)
    judged(db, "bob", "same-model", Status.CORRECT, 1.0)
    board = client.get("/v1/leaderboard/kl_div?by=model").json()
    (entry,) = board["devices"][0]["entries"]
    assert entry["name"] == "same-model" and entry["submission_id"] == first and entry["submitter"] == "ann"


def test_baselines_per_device_appear_on_the_task(client, db):
    judged(db, "ann", "m", Status.CORRECT, 1.0, device="H100", eager_ms=3.9, compile_ms=0.75)
    (baseline,) = client.get("/v1/tasks/kl_div").json()["baselines"]
    assert baseline["device_name"] == "H100" and baseline["baselines_ms"] == {"eager": 3.9, "compile": 0.75}
    assert abs(baseline["speed_of_light_ms"] - (2 << 30) / 3e12 * 1e3) < 1e-9


def test_bad_sort_is_422(client):
    assert client.get("/v1/leaderboard/kl_div?sort=random").status_code == 422


def test_cli_leaderboard_by_model_shows_one_model_column(client, db, monkeypatch):
    from typer.testing import CliRunner

    from service.cli import submissions
    from service.cli.main import app
    from service.client import JudgeClient

    judged(db, "alice", "m-7b", Status.CORRECT, 2.0)
    judged(db, "bob", "m-70b", Status.CORRECT, 1.0)
    # The CLI's client, talking to the in-process app.
    monkeypatch.setattr(submissions, "client", lambda url, key: JudgeClient("http://testserver", "",
                                                                            transport=InProcessTransport(client)))
    runner = CliRunner()
    by_model = runner.invoke(app, ["leaderboard", "kl_div", "--by", "model"])
    assert by_model.exit_code == 0, by_model.output
    header = next(line for line in by_model.output.splitlines() if "median ms" in line)
    assert header.count("model") == 1 and "submitter" not in header, by_model.output
    assert by_model.output.count("m-70b") == 1 and by_model.output.count("m-7b") == 1
    by_submitter = runner.invoke(app, ["leaderboard", "kl_div"]).output
    header = next(line for line in by_submitter.splitlines() if "median ms" in line)
    assert header.count("model") == 1 and header.count("submitter") == 1, by_submitter


def test_a_verdict_the_judge_left_unranked_is_listed_apart_with_its_reason(client, db):
    throttled = judged(db, "ann", "m1", Status.CORRECT, 0.5, unranked="the card was throttled during both timings")
    fine = judged(db, "bob", "m2", Status.CORRECT, 1.0)

    (device,) = client.get("/v1/leaderboard/kl_div").json()["devices"]
    assert [(e["rank"], e["submission_id"]) for e in device["entries"]] == [(1, fine)]  # the faster one is not ranked
    assert [(e["rank"], e["submission_id"], e["unranked_reason"]) for e in device["unranked"]] == [
        (None, throttled, "the card was throttled during both timings")]
    assert device["total"] == 1
    page = client.get("/leaderboard/kl_div").text
    assert "not ranked: the card was throttled during both timings" in page
    submission = client.get(f"/submissions/{throttled}").text
    assert "not ranked: the card was throttled during both timings" in submission
