"""GET /v1/tasks, /v1/tasks/{id}, /v1/tasks/{id}/prompt: anonymous, complete, 404 with the valid ids."""

from __future__ import annotations

from reference import get_task


def test_list_tasks(client):
    tasks = client.get("/v1/tasks").json()
    assert [t["id"] for t in tasks] == ["kl_div", "cross_entropy", "kl_div_train", "cross_entropy_train"]
    assert tasks[0]["kernelbench_id"] == "L1-98" and tasks[0]["official_shape"] == [16384, 16384]


def test_task_detail(client):
    body = client.get("/v1/tasks/cross_entropy").json()
    task = get_task("cross_entropy")
    assert body["problem_source"] == task.problem_source
    assert body["shapes"]["official"] == [32768, 4096] and body["shapes"]["cpu"] == list(task.cpu_shape)
    assert body["tolerance"]["atol"] == task.tolerance.atol and body["tolerance"]["why"]
    assert "aten::nll_loss" in body["forbidden_operators"]
    assert body["min_bytes"] == task.min_bytes(task.official_shape)
    assert body["baselines"] == []  # nothing measured yet


def test_prompt_contains_the_problem_and_the_instruction(client):
    response = client.get("/v1/tasks/kl_div/prompt")
    assert response.headers["content-type"].startswith("text/plain")
    text = response.text
    assert get_task("kl_div").problem_source.strip() in text
    assert "Name your optimized output architecture ModelNew" in text and "load_inline" in text
    assert "aten::kl_div" in text


def test_unknown_task_is_404_with_valid_ids(client):
    for path in ("/v1/tasks/nope", "/v1/tasks/nope/prompt", "/v1/leaderboard/nope"):
        response = client.get(path)
        assert response.status_code == 404
        assert response.json()["valid_task_ids"] == ["kl_div", "cross_entropy", "kl_div_train", "cross_entropy_train"]
