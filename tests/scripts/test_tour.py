"""scripts/tour.py reads README.md's tour as a user pastes it: every command of the block, in order, with only the
user's own edits (the key and ids the tour's answers print, another port where the default is taken)."""

from __future__ import annotations

from pathlib import Path

from scripts.tour import Tour, tour_commands

ROOT = Path(__file__).resolve().parents[2]


def test_the_tour_is_the_readmes_block_and_every_placeholder_is_filled():
    commands = tour_commands((ROOT / "README.md").read_text())
    verbs = [command.split()[1] for command in commands if command.startswith(".venv/bin/kernel-judge")]
    assert verbs == ["tasks", "prompt", "submit", "status", "leaderboard", "batch", "results", "fake-model"]
    assert commands[1].startswith("curl -s -X POST $JUDGE_URL/v1/keys") and "\\" not in commands[1]
    assert commands[-1].startswith("OPENAI_BASE_URL=http://127.0.0.1:8100/v1 .venv/bin/kernel-judge generate")
    assert commands[-1].endswith("--samples 2 --turns 1")  # the continued line, joined

    tour = Tour({}, port=8731, model_port=8732)
    tour.values = {"key": "kj_mine", "submission": "sub1", "batch": "bat1"}
    prepared = [tour.prepared(command) for command in commands]
    assert prepared[0] == "export JUDGE_URL=http://127.0.0.1:8731"
    assert "export JUDGE_API_KEY=kj_mine" in prepared
    assert ".venv/bin/kernel-judge status sub1" in prepared and ".venv/bin/kernel-judge results bat1" in prepared
    assert ".venv/bin/kernel-judge fake-model --port 8732 &" in prepared
    assert prepared[-1].startswith("OPENAI_BASE_URL=http://127.0.0.1:8732/v1 ")
    assert not [line for line in prepared if "<" in line or "kj_..." in line or "  #" in line]


def test_the_tour_learns_the_key_and_the_ids_from_the_answers():
    tour = Tour({}, port=8000, model_port=8100)
    tour.learn("curl -s -X POST $JUDGE_URL/v1/keys", '{"id": "k1", "key": "kj_abc"}')
    tour.learn(".venv/bin/kernel-judge submit x.py --task kl_div --wait", "s123\ncorrect: 1.2x\n")
    tour.learn(".venv/bin/kernel-judge batch examples/samples.jsonl --watch", "b456\nsummary\n")
    assert tour.values == {"key": "kj_abc", "submission": "s123", "batch": "b456"}
