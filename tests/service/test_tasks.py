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


def test_the_list_names_the_kernel_languages_this_host_judges(client):
    """Here CUDA C++ always, Triton, CuTe DSL and TileLang exactly when they import (sandbox/languages.py)."""
    import importlib.util

    expected = ["cuda"] + [lid for lid, module in (("triton", "triton"), ("cute", "cutlass"), ("tilelang", "tilelang"))
                           if importlib.util.find_spec(module) is not None]
    for task in client.get("/v1/tasks").json():
        assert task["languages"] == expected, task


def test_a_prompt_per_language_with_an_example_in_that_language(client):
    marks = {"cuda": "load_inline", "triton": "@triton.jit", "cute": "@cute.kernel", "tilelang": "@T.prim_func"}
    texts = {}
    for language, mark in marks.items():
        response = client.get("/v1/tasks/cross_entropy/prompt", params={"language": language})
        assert response.status_code == 200, response.text
        texts[language] = response.text
        assert mark in response.text and get_task("cross_entropy").problem_source.strip() in response.text
        assert all(other not in response.text for other in marks.values() if other != mark), language
    assert texts["cuda"] == client.get("/v1/tasks/cross_entropy/prompt").text  # KernelBench's prompt by default
    assert "Optimize the architecture named Model with custom TileLang kernels!" in texts["tilelang"]


def test_an_unknown_language_is_a_422_that_names_the_known_ones(client):
    response = client.get("/v1/tasks/kl_div/prompt", params={"language": "mojo"})
    assert response.status_code == 422
    assert all(language in response.text for language in ("cuda", "triton", "cute", "tilelang")), response.text
