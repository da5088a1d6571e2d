"""GET /v1/tasks, /v1/tasks/{id}, /v1/tasks/{id}/prompt: anonymous, complete, 404 with the valid ids."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from fastapi.testclient import TestClient

from reference import get_task
from service.core.config import Settings
from service.main import create_app
from service.prompts import EXAMPLE_CPP
from tests.service.conftest import ROOT


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
    """Here CUDA C++ always, Triton, CuTe DSL and TileLang exactly when they import (sandbox/shared/languages.py)."""
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


def test_the_cpu_has_a_prompt_in_its_own_language_with_the_size_it_judges(client):
    # cpp: C++ through torch's cpp extension, what a CPU host judges (tests/corpus/cpu/*_cpp_*.py).
    for task_id in ("kl_div", "cross_entropy", "kl_div_train"):
        task = get_task(task_id)
        response = client.get(f"/v1/tasks/{task_id}/prompt", params={"language": "cpp"})
        assert response.status_code == 200, response.text
        text = response.text
        assert "cpp_sources=elementwise_add_source" in text and "cuda_sources" not in text and "__global__" not in text
        assert ".cuda()" not in text.split("You are given")[0]  # the worked example runs on the CPU too
        assert task.problem_source.strip() in text
        judged, official = (" x ".join(map(str, s)) for s in (task.cpu_shape, task.official_shape))
        assert f"on the same CPU, at the task's CPU size (inputs of shape {judged} instead of get_inputs' {official})" \
            in text
        assert "Optimize the architecture named Model with custom C++ CPU operators!" in text
    assert "on the same GPU" in client.get("/v1/tasks/kl_div/prompt").text


def _app_judging_on(devices: str, db_url: str) -> TestClient:
    return TestClient(create_app(Settings(database_url=db_url, devices=devices)))


def test_tasks_show_the_size_judged_on_this_host(db, settings):
    # The CPU judges the task's CPU size (sandbox/pipeline.py), a GPU the official one: each host says which.
    for devices, device in (("cpu", "cpu"), ("cuda:0,cuda:1", "cuda")):
        with _app_judging_on(devices, settings.db_url) as app:
            listed = {t["id"]: t for t in app.get("/v1/tasks").json()}
            detail = app.get("/v1/tasks/cross_entropy").json()
        for task_id, summary in listed.items():
            task = get_task(task_id)
            expected = task.cpu_shape if device == "cpu" else task.official_shape
            assert summary["judged_device"] == device and summary["judged_shape"] == list(expected), summary
        assert detail["judged_shape"] == listed["cross_entropy"]["judged_shape"]
    assert listed["kl_div"]["judged_shape"] == [16384, 16384]


@pytest.mark.slow  # a real API process and the real CLI in subprocesses
def test_the_cli_on_a_cpu_host_gives_the_cpp_prompt_and_the_cpu_size(live_api):
    _, base = live_api()  # JUDGE_DEVICES=cpu, as serve on a host without a GPU
    cli = [sys.executable, "-m", "service.cli.main"]
    tasks = subprocess.run([*cli, "tasks", "--url", base], capture_output=True, text=True, timeout=120, cwd=ROOT,
                           env={**os.environ, "COLUMNS": "200"}, check=False)
    assert tasks.returncode == 0, tasks.stderr
    assert "64 x 512 (cpu)" in tasks.stdout and "16384 x 16384" in tasks.stdout and "--language cpp" in tasks.stdout
    prompt = subprocess.run([*cli, "prompt", "kl_div", "--language", "cpp", "--url", base], capture_output=True,
                            text=True, timeout=120, cwd=ROOT, check=False)
    assert prompt.returncode == 0, prompt.stderr
    assert "custom C++ CPU kernels" in prompt.stdout and "inputs of shape 64 x 512" in prompt.stdout


@pytest.mark.slow  # compiles the example with g++
def test_the_cpp_prompts_worked_example_builds_and_adds_on_the_cpu(tmp_path):
    # The example a model imitates must itself be C++ the CPU runs (built as the judge builds: load_inline, g++).
    script = EXAMPLE_CPP + ("\na, b = torch.randn(3, 130), torch.randn(3, 130)\n"
                            "assert torch.equal(ModelNew()(a, b), a + b)\nprint('added')\n")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=600, check=False,
                          env={**os.environ, "TORCH_EXTENSIONS_DIR": str(tmp_path), "MAX_JOBS": "1"})
    assert done.returncode == 0 and done.stdout.strip() == "added", done.stderr[-3000:]
