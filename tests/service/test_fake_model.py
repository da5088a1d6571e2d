"""The fake model server (service/fakemodel, `kernel-judge fake-model`): the protocol in-process, then the
generate loop through the CLI against it with real processes (the fake server, an API, a worker)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import httpx
from fastapi.testclient import TestClient

from reference import all_tasks
from service import crud
from service.fakemodel import FakeModel, create_app
from service.fakemodel.kernels import KERNELS
from service.fakemodel.script import recognise
from service.prompts import generation_prompt
from tests.service.conftest import ROOT, Proc, free_port, wait_for


def chat(client: TestClient, content: str, **extra: object) -> httpx.Response:
    return client.post("/v1/chat/completions", json={"model": "m", "messages": [{"role": "user", "content": content}],
                                                     **extra})


def test_every_prompt_of_the_judge_is_recognised():
    for task in all_tasks():
        for language in ("cuda", "cpp", "triton"):
            assert recognise(generation_prompt(task, language)) == (task.id.value, language)
    assert recognise("Write me a kernel for softmax") is None


def test_first_turns_alternate_broken_and_honest_and_a_refinement_is_honest():
    prompt = generation_prompt(next(t for t in all_tasks() if t.id.value == "kl_div"), "cpp")
    with TestClient(create_app(FakeModel(compile_error_every=2))) as client:
        answers = [chat(client, prompt).json()["choices"][0]["message"]["content"] for _ in range(4)]
        assert ["undeclared_scale" in a for a in answers] == [True, False, True, False]
        assert all(KERNELS[("kl_div", "cpp")] in a for a in answers[1::2])
        refined = client.post("/v1/chat/completions", json={"model": "m", "messages": [
            {"role": "user", "content": prompt}, {"role": "assistant", "content": answers[0]},
            {"role": "user", "content": "compile_error: 'undeclared_scale' was not declared"}]}).json()
        assert KERNELS[("kl_div", "cpp")] in refined["choices"][0]["message"]["content"]
        several = chat(client, prompt, n=3, temperature=0.7).json()["choices"]
        assert [c["index"] for c in several] == [0, 1, 2]
        unknown = chat(client, "write a softmax kernel").json()["choices"][0]["message"]["content"]
        assert "```" not in unknown and "kl_div (cpp)" in unknown
        assert client.get("/v1/models").json()["data"][0]["id"] == "kernel-judge-fake"


def test_bad_requests_are_4xx_naming_the_field():
    with TestClient(create_app(FakeModel(), api_key="sk-fake")) as client:
        assert chat(client, "x").status_code == 401
        headers = {"Authorization": "Bearer sk-fake"}
        empty = client.post("/v1/chat/completions", json={"model": "m", "messages": []}, headers=headers)
        assert empty.status_code == 422 and "messages" in empty.text
        no_model = client.post("/v1/chat/completions", json={"messages": [{"role": "user", "content": "x"}]},
                               headers=headers)
        assert no_model.status_code == 422 and "model" in no_model.text
        bad_role = client.post("/v1/chat/completions", json={"model": "m", "messages": [
            {"role": "robot", "content": "x"}]}, headers=headers)
        assert bad_role.status_code == 422 and "role" in bad_role.text
        assert client.post("/v1/chat/completions", json={"model": "m", "messages": [
            {"role": "user", "content": "x"}]}, headers=headers).status_code == 200


def test_generate_from_the_cli_against_the_fake_model_cli(db, live_api, spawn, tmp_path):
    """As the user guide says: `kernel-judge fake-model` in one process, `generate --language cpp` in another,
    a real API and worker judging on this CPU. Two samples: the first gets a compile error, the second an honest
    kernel; one refinement turn fixes the first."""
    with db.transaction() as session:
        key = crud.create_key(session, "ivan")[1]
    _, base = live_api()
    spawn("worker")
    port = free_port()
    fake = Proc([sys.executable, "-m", "service.cli.main", "fake-model", "--port", str(port)], dict(os.environ),
                tmp_path / "fake-model.log")
    try:
        models = f"http://127.0.0.1:{port}/v1/models"

        def answers() -> bool:
            assert fake.popen.poll() is None, fake.output()
            try:
                return httpx.get(models, timeout=2).status_code == 200
            except httpx.TransportError:
                return False

        wait_for(answers, 60, "the fake model server")
        assert f"OPENAI_BASE_URL=http://127.0.0.1:{port}/v1" in fake.output()  # what it tells the user to set
        done = subprocess.run([sys.executable, "-m", "service.cli.main", "generate", "--task", "kl_div",
                               "--language", "cpp", "--model", "fake", "--samples", "2", "--turns", "1",
                               "--concurrency", "1", "--poll", "0.2", "--json", "--url", base, "--key", key],
                              check=False, capture_output=True, text=True, cwd=ROOT, timeout=540,
                              env={**os.environ, "OPENAI_BASE_URL": f"http://127.0.0.1:{port}/v1"})
    finally:
        fake.close()
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert [t["verdicts"] for t in report["turns"]] == [{"compile_error": 1, "correct": 1}, {"correct": 1}], report
    assert report["solved"] == 2
    assert sorted(c["statuses"] for c in report["conversations"]) == [["compile_error", "correct"], ["correct"]]
    assert "turn 0: 2 samples" in done.stderr and "solved 2/2" in done.stderr
