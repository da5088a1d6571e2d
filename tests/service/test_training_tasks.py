"""The training variants through the service: listed and described by /v1/tasks, prompted, submitted one by one
and in a batch, judged by a real worker at the CPU size, and ranked on their own leaderboard and page."""

from __future__ import annotations

import json

import pytest

from reference import get_task
from tests.service.conftest import CORPUS, wait_for

FUSED_KL = (CORPUS / "cpu" / "kl_div_train_cpp_fused.py").read_text()
CE_FUNCTION = (CORPUS / "cpu" / "cross_entropy_train_cpp_function.py").read_text()
ZERO_GRADIENT = (CORPUS / "hostile" / "cpu" / "t1_zero_gradient.py").read_text()
JUDGE_S = 900  # three candidates, two tasks' step baselines (torch.compile of forward + backward) on 2 cores


def test_training_tasks_are_listed_beside_the_forward_ones(client):
    tasks = {t["id"]: t for t in client.get("/v1/tasks").json()}
    assert tasks["kl_div_train"]["variant"] == "training" and tasks["kl_div_train"]["forward_task"] == "kl_div"
    assert tasks["cross_entropy_train"]["forward_task"] == "cross_entropy"
    assert tasks["kl_div"]["variant"] == "forward" and tasks["kl_div"]["forward_task"] is None
    assert tasks["cross_entropy_train"]["official_shape"] == tasks["cross_entropy"]["official_shape"]


def test_training_task_detail_and_prompt_state_the_gradient_rules(client):
    body = client.get("/v1/tasks/cross_entropy_train").json()
    task = get_task("cross_entropy_train")
    assert body["problem_source"] == get_task("cross_entropy").problem_source
    assert body["gradient_tolerance"]["rtol"] == task.training.gradient_tolerance.rtol
    assert "loss.backward" in body["training_statement"]
    assert "aten::_log_softmax_backward_data" in body["forbidden_operators"]
    assert body["min_bytes"] == task.min_bytes(task.official_shape)
    assert client.get("/v1/tasks/cross_entropy").json()["gradient_tolerance"] is None
    prompt = client.get("/v1/tasks/kl_div_train/prompt").text
    assert task.problem_source.strip() in prompt or get_task("kl_div").problem_source.strip() in prompt
    assert "requires_grad=True" in prompt and "loss.backward(g)" in prompt
    assert "requires_grad" not in client.get("/v1/tasks/kl_div/prompt").text


@pytest.mark.parametrize("db_url", ["sqlite"], indirect=True)
def test_training_tasks_are_judged_batched_and_ranked_through_the_api(client, auth, spawn):
    one = client.post("/v1/submissions", json={"task": "kl_div_train", "source": FUSED_KL, "model": "m"},
                      headers=auth)
    assert one.status_code == 202, one.text
    batch = client.post("/v1/batches", json=[
        {"task": "kl_div_train", "source": ZERO_GRADIENT, "model": "m", "sample_index": 0},
        {"task": "cross_entropy_train", "source": CE_FUNCTION, "model": "m", "sample_index": 0},
    ], headers=auth).json()
    assert batch["accepted"] == 2
    worker = spawn("worker")
    sub_url = f"/v1/submissions/{one.json()['id']}"
    wait_for(lambda: client.get(sub_url).json()["status"] == "done"
             and client.get(batch["url"]).json()["state"] == "done", JUDGE_S, "the training verdicts")

    verdict = client.get(sub_url, headers=auth).json()["verdict"]  # details are its submitter's (private)
    assert verdict["status"] == "correct", verdict["diagnosis"]
    assert verdict["details"]["training"]["forward"]["median_ms"] > 0
    assert verdict["performance"]["min_bytes"] == get_task("kl_div_train").min_bytes(get_task("kl_div").cpu_shape)
    results = client.get(f"{batch['url']}/results", headers=auth).text.splitlines()
    rows = {r["task"]: r for r in map(json.loads, results)}
    assert rows["kl_div_train"]["status"] == "incorrect" and "gradient" in rows["kl_div_train"]["diagnosis"]
    assert rows["cross_entropy_train"]["status"] == "correct", rows["cross_entropy_train"]["diagnosis"]

    # One ranking per task and device: the training entry is on kl_div_train's board, not on kl_div's.
    (device,) = client.get("/v1/leaderboard/kl_div_train").json()["devices"]
    assert [e["submission_id"] for e in device["entries"]] == [one.json()["id"]]
    assert client.get("/v1/leaderboard/kl_div").json()["devices"] == []
    (ce_device,) = client.get("/v1/leaderboard/cross_entropy_train").json()["devices"]
    assert [e["submission_id"] for e in ce_device["entries"]] == [rows["cross_entropy_train"]["submission_id"]]
    page = client.get("/leaderboard/kl_div_train")
    assert page.status_code == 200 and "alice" in page.text
    home = client.get("/").text
    assert 'id="task-kl_div_train"' in home and 'id="task-cross_entropy_train"' in home
    assert worker.terminate() == 0
