"""The generation loop against a local chat-completions server (the one allowed fake: a remote LLM) and a real
API process with a real worker: a compile error on the first turn, the judge's diagnosis fed back, a correct
kernel on the next, every turn stored and linked."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import httpx
import pytest

from service import crud
from service.client import JudgeClient
from service.generation import (
    ChatClient,
    GenerationConfig,
    feedback_message,
    run_generation,
)
from tests.fixtures.chat_server import ChatServer, refine_after_compile_error
from tests.service.conftest import CORPUS, CORRECT_KL_DIV, ROOT

BROKEN = (CORPUS / "cpu" / "compile_error.py").read_text()
FIXED = CORRECT_KL_DIV.read_text()


@pytest.mark.parametrize("db_url", ["postgresql"], indirect=True)
def test_refinement_turns_turn_a_compile_error_into_a_correct_kernel(db, live_api, spawn):
    with db.transaction() as session:
        key = crud.create_key(session, "ivan")[1]
    _, base = live_api()
    spawn("worker")
    chat = ChatServer(refine_after_compile_error(BROKEN, FIXED), api_key="sk-local")
    config = GenerationConfig(task="kl_div", model="scripted-7b", samples=2, turns=3, temperature=0.7,
                              max_tokens=2048, poll_s=0.2)
    seen = []
    with chat.running():
        with JudgeClient(base, key) as judge:
            llm = ChatClient(base_url=chat.base_url, api_key="sk-local")
            report = run_generation(config, judge, llm, on_turn=seen.append)
            llm.close()
            turn1 = [row.model_dump() for row in judge.results(report.turns[1].batch_id)]
            first_ids = [c.submission_ids[0] for c in report.conversations]
        requests = list(chat.requests)
        # The same loop from the command line: one sample, one refinement turn, summary per turn on stderr.
        done = subprocess.run([sys.executable, "-m", "service.cli.main", "generate", "--task", "kl_div",
                               "--samples", "1", "--turns", "1", "--poll", "0.2", "--json", "--url", base,
                               "--key", key],
                              check=False, capture_output=True, text=True, cwd=ROOT, timeout=300,
                              env={**os.environ, "OPENAI_BASE_URL": chat.base_url, "OPENAI_API_KEY": "sk-local",
                                   "JUDGE_GEN_MODEL": "scripted-7b"})

    # Turn 0: both samples fail to compile (the second is the same code: judged once); turn 1 fixes both and
    # the loop stops there, before the turns it was allowed.
    assert [t.verdicts for t in report.turns] == [{"compile_error": 2}, {"correct": 2}] == [t.verdicts for t in seen]
    assert report.solved == 2 and [c.statuses for c in report.conversations] == [["compile_error", "correct"]] * 2

    # The model saw the prompt, then its answer, then the judge's diagnosis with the compiler's error line.
    assert len(requests) == 4
    first, refine = requests[0], requests[2]
    assert first["model"] == "scripted-7b" and first["temperature"] == 0.7 and first["max_tokens"] == 2048
    assert "ModelNew" in first["messages"][0]["content"] and len(first["messages"]) == 1
    roles = [m["role"] for m in refine["messages"]]
    assert roles == ["user", "assistant", "user"]
    feedback = refine["messages"][2]["content"]
    assert "compile_error" in feedback and "undeclared_weight" in feedback
    assert feedback.index("Compiler errors") < feedback.index("Fix the problem")

    # Every turn is stored and linked: turn 1's samples point at the turn-0 submissions they refine.
    assert [r["turn"] for r in turn1] == [1, 1]
    assert [r["parent_id"] for r in turn1] == first_ids
    assert all(r["status"] == "correct" for r in turn1)

    # The command line ran the same loop and links its turns the same way.
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout)
    assert out["solved"] == 1 and out["conversations"][0]["statuses"] == ["compile_error", "correct"]
    assert "turn 0: 1 samples" in done.stderr and "turn 1: 1 samples" in done.stderr
    child = httpx.get(f"{base}/v1/batches/{out['turns'][1]['batch_id']}/results").text
    assert json.loads(child)["parent_id"] == out["conversations"][0]["submission_ids"][0]


def test_feedback_puts_compiler_errors_first_and_names_the_failing_trial():
    compile_error = feedback_message({"status": "compile_error", "diagnosis": "the extension failed to compile",
                                      "details": {"errors": ["main.cpp:4:18: error: 'w' was not declared"]},
                                      "compile_log": "ninja ...\n" * 500})
    assert compile_error.index("main.cpp:4:18") < compile_error.index("Fix the problem")
    assert len(compile_error) < 7000  # a huge build log never floods the conversation
    wrong = feedback_message({"status": "incorrect", "diagnosis": "trial 1 failed", "trials": [
        {"trial": 0, "distribution": "official", "shape": [8, 16], "passed": True},
        {"trial": 1, "distribution": "peaked", "shape": [8, 16], "passed": False, "max_abs_error": 0.5,
         "expected": 1.0, "got": 1.5}]})
    assert "trial 1 (peaked inputs, shape [8, 16])" in wrong and "max_abs_error 0.5" in wrong
    policy = feedback_message({"status": "policy_violation", "diagnosis": "line 9: calls torch.nn.functional.kl_div",
                               "details": {"rule": "forbidden_operator", "calls": ["aten::kl_div"]}})
    assert "Rule broken: rule: forbidden_operator; calls: ['aten::kl_div']" in policy
