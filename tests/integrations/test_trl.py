"""TRL's real `GRPOTrainer` with the judge as its reward function, against a real service and worker.

The model is a one-layer GPT-2 built from a config and a word-level tokenizer built here (nothing is
downloaded), on the CPU. One test runs a whole training step (`train()`, whose random completions the judge
scores as having no candidate); one feeds chosen completions through the trainer's own reward plumbing,
`GRPOTrainer._calculate_rewards` (trl 1.16), in TRL's conversational format with a `task` column.
"""

from __future__ import annotations

import math

import pytest
from datasets import Dataset
from tokenizers import Tokenizer, models, pre_tokenizers
from transformers import GPT2Config, GPT2LMHeadModel, PreTrainedTokenizerFast
from trl import GRPOConfig, GRPOTrainer
from trl.trainer.utils import is_async_callable

from service.client import JudgeClient
from service.integrations.trl import AsyncKernelReward, KernelReward
from tests.integrations.conftest import COMPLETION_OF_CORRECT, HACK, PROSE
from tests.service.conftest import free_port

pytestmark = pytest.mark.integrations  # TRL and transformers: the [test-integrations] extra

WORDS = ["<pad>", "<eos>", "<unk>", "write", "a", "kernel", "class", "ModelNew", "import", "torch"]


def _trainer(reward_funcs: list, tmp_path, n: int = 4) -> GRPOTrainer:
    tok = Tokenizer(models.WordLevel({w: i for i, w in enumerate(WORDS)}, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=tok, pad_token="<pad>", eos_token="<eos>",
                                        unk_token="<unk>")
    model = GPT2LMHeadModel(GPT2Config(vocab_size=len(WORDS), n_positions=64, n_embd=16, n_layer=1, n_head=2,
                                       pad_token_id=0, eos_token_id=1, bos_token_id=1))
    dataset = Dataset.from_dict({"prompt": ["write a kernel"] * n, "task": ["kl_div"] * n})
    args = GRPOConfig(output_dir=str(tmp_path / "grpo"), use_cpu=True, max_steps=1, per_device_train_batch_size=2,
                      num_generations=2, max_completion_length=6, report_to=[], logging_steps=1,
                      save_strategy="no", bf16=False)
    return GRPOTrainer(model=model, processing_class=tokenizer, reward_funcs=reward_funcs, train_dataset=dataset,
                       args=args)


@pytest.mark.slow
@pytest.mark.timeout(1500)  # the first judged kernel is built on a shared 2-core machine: minutes under load
def test_a_grpo_training_step_is_scored_by_the_judge(judge, tmp_path):
    reward = KernelReward(url=judge.url, key=judge.key, deadline_s=600)
    assert not is_async_callable(reward)
    trainer = _trainer([reward], tmp_path)
    with JudgeClient(judge.url, judge.key) as client:
        before = {b.id for b in client.batches()}
        trainer.train()
        batches = [client.batch(b.id) for b in client.batches() if b.id not in before]
    logged = trainer.state.log_history[0]
    # two random completions of the model: judged (no candidate module: the format term's 0), not dropped
    assert len(batches) == 1 and batches[0].total == 2 and sum(batches[0].verdicts.values()) == 2
    assert float(logged["rewards/kernel_judge/mean"]) == 0.0
    assert float(logged["kernel_judge/infra_failures"]) == 0.0


@pytest.mark.slow
@pytest.mark.timeout(1500)  # the first judged kernel is built on a shared 2-core machine: minutes under load
def test_the_trainers_reward_plumbing_carries_verdicts_and_outages(judge, tmp_path):
    good = AsyncKernelReward(url=judge.url, key=judge.key, deadline_s=600, reward={"hack_penalty": -2.0})
    dead = KernelReward(url=f"http://127.0.0.1:{free_port()}", key="k", task="kl_div", attempts=1)
    assert is_async_callable(good)  # TRL runs it on its own loop, beside the other async reward functions
    trainer = _trainer([good, dead], tmp_path)
    prompt = [{"role": "user", "content": "write a kernel"}]
    completions = [[{"role": "assistant", "content": text}] for text in (COMPLETION_OF_CORRECT, HACK, PROSE)]
    inputs = [{"prompt": prompt, "task": "kl_div"} for _ in completions]
    rewards = trainer._calculate_rewards(inputs, [prompt] * 3, completions, [[1]] * 3)
    correct, hack, prose = rewards[:, 0].tolist()
    assert correct > 0.4 and hack == -2.0 and prose == 0.0  # compile + correct + speedup; the shaped penalty
    assert all(math.isnan(value) for value in rewards[:, 1].tolist())  # the outage: no reward, not a 0
    # TRL runs the sync reward functions first, then the async ones: each logged its own figures
    assert sorted(trainer._pending_metrics["kernel_judge/infra_failures"]) == [0.0, 3.0]
    assert sorted(trainer._pending_metrics["kernel_judge/correct"]) == [0.0, 1.0]
    assert sorted(trainer._pending_extra_logs["kernel_judge_status"]) == sorted(
        ["correct", "policy_violation", "compile_error"] + ["unavailable"] * 3)


@pytest.mark.slow
@pytest.mark.timeout(1500)  # the first judged kernel is built on a shared 2-core machine: minutes under load
def test_plain_completions_and_extra_columns_as_trl_passes_them(judge):
    reward = KernelReward(url=judge.url, key=judge.key, deadline_s=600)
    out = reward(prompts=["write a kernel"] * 2, completions=[HACK, PROSE], completion_ids=[[1], [2]],
                 task=["kl_div", "kl_div"], difficulty=["easy", "hard"], trainer_state=None)
    assert out == [-1.0, 0.0]
