"""`generate --profile`: the next turn's message carries the sample's profile text, read from the real app (both
databases) as a GPU worker recorded it; a correct kernel is asked to be made faster; no profile, no mention."""

from __future__ import annotations

from pathlib import Path

from sandbox.profiling.report import Profile, parse_raw_csv
from service.client import JudgeClient
from service.generation import GenerationConfig
from service.generation.feedback import feedback_message, speedup_message
from service.generation.loop import Conversation, _add_feedback
from service.profiles import store
from tests.service.conftest import CORRECT_KL_DIV
from tests.service.test_profiles import _AppTransport

NCU_LOG = (Path(__file__).resolve().parents[1] / "fixtures" / "ncu" / "kl_div_fast_h100.csv").read_text()


def _asked(client, auth, profile: bool = True) -> str:
    body = {"task": "kl_div", "source": CORRECT_KL_DIV.read_text(), "profile": profile}
    return client.post("/v1/submissions", json=body, headers=auth).json()["id"]


def _conversation(sub_id: str, status: str) -> Conversation:
    return Conversation(0, [{"role": "user", "content": "prompt"}, {"role": "assistant", "content": "code"}],
                        submission_ids=[sub_id], judged_ids=[sub_id], statuses=[status])


def test_next_turn_carries_the_profile_text(client, auth, api_key, db):
    profiled, unavailable = _asked(client, auth), _asked(client, auth)
    parsed = parse_raw_csv(NCU_LOG)
    with db.transaction() as session:
        store.record(session, profiled, Profile(status="ok", ncu_version="2025.3.1.0", calls=3,
                                                launches=parsed.launches, kernels=parsed.kernels), "gpu:1")
        store.record(session, unavailable, Profile(status="unavailable", reason="not available on this host"), "cpu:1")
    config = GenerationConfig(task="kl_div", model="m", profile=True, poll_s=0.01, profile_timeout_s=5)
    wrong, right, plain = (_conversation(profiled, "incorrect"), _conversation(profiled, "correct"),
                           _conversation(unavailable, "incorrect"))
    # The loop reads its samples' profiles with the key that submitted them (a profile is the owner's to read).
    with JudgeClient("http://testserver", api_key, transport=_AppTransport(client)) as judge:
        _add_feedback(judge, [wrong, right, plain], config)
    told = wrong.messages[-1]["content"]
    assert told.startswith("The judge rejected your kernel: incorrect.")
    assert "Nsight Compute profile (ncu 2025.3.1.0)" in told and "1. <unnamed>::kl_fast_kernel(" in told
    assert told.index("Nsight Compute profile") < told.index("Fix the problem")
    faster = right.messages[-1]["content"]
    assert faster.startswith("The judge accepted your kernel: correct.") and "top stalls: long_scoreboard" in faster
    assert faster.endswith("`class ModelNew(nn.Module)`, with the same inputs and outputs as the reference `Model`.")
    assert "profile" not in plain.messages[-1]["content"].lower()  # unavailable: the model is not told about it


def test_messages_place_the_profile_after_the_diagnosis():
    verdict = {"status": "incorrect", "diagnosis": "trial 2 failed"}
    message = feedback_message(verdict, profile="Nsight Compute profile (...): 1 kernel")
    assert message.index("Diagnosis: trial 2 failed") < message.index("Nsight Compute profile")
    assert "Nsight Compute" not in feedback_message(verdict)
    correct = {"status": "correct", "performance": {"candidate": {"median_ms": 0.7213}, "speedups": {"eager": 5.42},
                                                    "speed_of_light_fraction": 0.97}}
    text = speedup_message(correct, "PROFILE")
    assert "Timing: median 0.7213 ms, 5.42x eager, 97.0% of speed-of-light." in text and "PROFILE" in text
