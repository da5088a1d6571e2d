"""docs/integrations.md's examples (and the user guide's rewards call), run as written against a real service
and worker, with the judge in JUDGE_URL / JUDGE_API_KEY as the page says: a wrong name or argument in the page
fails here.

Nothing is injected into a snippet's names. Only what needs the outside world is changed: TRL's model id
becomes a tiny model saved here (its config as written runs on this CPU), and its training runs one step
rather than the page's epochs. veRL is not installed, so its command line is read the way veRL reads it
(`custom_reward_function.path`, `name` and `reward_kwargs`, loaded as
`verl/trainer/ppo/reward.py::get_custom_reward_fn` does, with `spec_from_file_location("custom_module", path)`
and the keywords merged into every call). The candidates need no build (a hack, prose): the correct kernel
through each adapter is judged in that adapter's own tests.
"""

from __future__ import annotations

import asyncio
import importlib.util
import json
import shlex
import subprocess
import sys

import pytest
from tokenizers import Tokenizer, models, pre_tokenizers
from transformers import GPT2Config, GPT2LMHeadModel, PreTrainedTokenizerFast

from service.client import JudgeClient
from service.integrations.trl import KernelReward
from service.integrations.verifiers import KernelTaskset
from tests.integrations.conftest import HACK, PROSE, ROOT, doc_block

# the first judged kernel is built: minutes under load; transformers and verifiers: the [test-integrations] extra
pytestmark = [pytest.mark.slow, pytest.mark.integrations, pytest.mark.timeout(1500)]


@pytest.fixture
def judge_env(judge, monkeypatch):
    monkeypatch.setenv("JUDGE_URL", judge.url)
    monkeypatch.setenv("JUDGE_API_KEY", judge.key)
    return judge


def test_the_trl_example_trains_as_written(judge_env, tmp_path, monkeypatch):
    words = ["<pad>", "<eos>", "<unk>", "write", "a", "kernel"]
    tok = Tokenizer(models.WordLevel({w: i for i, w in enumerate(words)}, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=tok, pad_token="<pad>", eos_token="<eos>", unk_token="<unk>")
    tokenizer.chat_template = "{% for m in messages %}{{ m['content'] }} {% endfor %}"
    # positions for the judge's whole prompt (one token a word here) and TRL's default completion length
    GPT2LMHeadModel(GPT2Config(vocab_size=len(words), n_positions=4096, n_embd=8, n_layer=1, n_head=1,
                               pad_token_id=0, eos_token_id=1, bos_token_id=1)).save_pretrained(tmp_path / "m")
    tokenizer.save_pretrained(tmp_path / "m")
    code = doc_block("TRL (`GRPOTrainer`, RLOO)", "python")
    assert code.count("Qwen/Qwen2.5-Coder-7B-Instruct") == 1 and code.rstrip().endswith("trainer.train()")
    setup = code.replace("Qwen/Qwen2.5-Coder-7B-Instruct", str(tmp_path / "m")).rstrip()[:-len("trainer.train()")]
    monkeypatch.chdir(tmp_path)
    scope: dict = {}
    exec(compile(setup, "docs/integrations.md", "exec"), scope)
    trainer, reward = scope["trainer"], scope["reward"]
    assert isinstance(reward, KernelReward) and trainer.reward_funcs == [reward]
    assert "ModelNew" in trainer.train_dataset[0]["prompt"][0]["content"]  # the judge's prompt, fetched
    assert trainer.args.num_generations == 8 and trainer.train_dataset[0]["task"] == "kl_div"
    assert not trainer.args.bf16 and trainer.args.use_cpu  # the page's config on a host without a GPU
    trainer.args.max_steps = 1  # the page's own train() call, for one step of its eight generations
    exec(compile("trainer.train()", "docs/integrations.md", "exec"), scope)
    assert trainer.state.global_step == 1
    judged = JudgeClient().submissions(task="kl_div")
    assert len(judged) >= 1 and {s.task for s in judged} == {"kl_div"}  # the step's completions reached the judge
    # the reward as the trainer calls it, on the page's dataset format
    rows = [trainer.train_dataset[0]] * 2
    out = reward(prompts=[r["prompt"] for r in rows], completions=[[{"role": "assistant", "content": HACK}]] * 2,
                 task=[r["task"] for r in rows])
    assert out == [-1.0, -1.0]


def _verl_config(command: str) -> dict:
    """`custom_reward_function.*` from the page's command line, nested and typed as Hydra/OmegaConf does."""
    config: dict = {}
    for arg in shlex.split(command.replace("\\\n", " "), comments=True):
        key, _, value = arg.lstrip("+").partition("=")
        if not key.startswith("custom_reward_function."):
            continue
        *parents, leaf = key.split(".")[1:]
        node = config
        for name in parents:
            node = node.setdefault(name, {})
        node[leaf] = int(value) if value.isdigit() else value
    return config


def test_the_verl_command_line_loads_and_scores(judge_env, monkeypatch):
    command = doc_block("veRL", "bash")
    config = _verl_config(command)
    assert config["path"] == "service/integrations/verl.py" and config["name"] == "compute_score"
    assert config["reward_kwargs"] == {"deadline_s": 600, "reward": {"speedup_transform": "log"}}
    spec = importlib.util.spec_from_file_location("custom_module", ROOT / config["path"])
    module = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, "custom_module", module)
    spec.loader.exec_module(module)
    for name in ("compute_score", "compute_score_batch", "compute_score_async"):  # the names the page offers
        assert callable(getattr(module, name))

    def fn(*args, **kwargs):  # veRL's _call_with_kwargs: reward_kwargs win over the call's own
        return module.compute_score(*args, **{**kwargs, **config["reward_kwargs"]})

    # the three ways the page's comment gives a row's task (a hack: judged at once, before any build; the
    # correct kernel through each veRL manager is test_verl.py's)
    scores = [fn(data_source="kernel_judge/kl_div", solution_str=HACK, ground_truth=None),
              fn(data_source="kernelbench", solution_str=HACK, ground_truth="kl_div"),
              fn(data_source="kernelbench", solution_str=HACK, ground_truth=None, extra_info={"task": "kl_div"})]
    assert [s["score"] for s in scores] == [-1.0] * 3 and {s["status"] for s in scores} == {"policy_violation"}
    assert [s["infra_failure"] for s in scores] == [0.0] * 3


def test_the_verifiers_example_loads_the_taskset(judge_env):
    scope: dict = {}
    exec(compile(doc_block("verifiers (0.4, `verifiers.v1`)", "python"), "docs/integrations.md", "exec"), scope)
    taskset = scope["taskset"]
    assert isinstance(taskset, KernelTaskset) and scope["__all__"] == ["KernelTaskset", "load_environment"]
    tasks = list(taskset)
    assert len(tasks) == 16 and {t.data.kernel_task for t in tasks} == {"kl_div", "cross_entropy"}
    assert tasks[0].config.reward == {"hack_penalty": -1.0} and "ModelNew" in tasks[0].data.prompt


def test_the_openenv_example_runs_an_episode(judge_env, capsys):
    scope: dict = {}
    exec(compile(doc_block("OpenEnv", "python"), "docs/integrations.md", "exec"), scope)
    obs = scope["obs"]  # the page's placeholder policy writes no code: every turn is judged, none ends it early
    assert obs.done and obs.turn == 4 and obs.status == "compile_error" and obs.reward == 0.0 and obs.feedback
    printed = capsys.readouterr().out.splitlines()
    assert printed == [f"{turn} compile_error 0.0" for turn in range(1, 5)], printed
    # the page's async form of the step, and an episode the policy ends with a hack
    env, action = scope["env"], scope["KernelAction"]
    obs = env.reset()
    assert "ModelNew" in obs.prompt
    assert env.step(action(code=HACK)).status == "policy_violation"
    env.reset()
    assert asyncio.run(env.step_async(action(code=PROSE))).status == "compile_error"


def test_the_user_guides_rewards_call_runs_as_written(judge_env):
    done = subprocess.run(["bash", "-c", doc_block("The tour over HTTP", "bash", "docs/user-guide.md")],
                          capture_output=True, text=True, timeout=900, check=False)
    assert done.returncode == 0, done.stderr
    answer = json.loads(done.stdout)
    assert answer["complete"] is True  # neither needs a build: the page's call comes back at once
    prose, module = answer["results"]
    assert prose["index"] == 0 and prose["reward"] == 0.0 and prose["status"] == "compile_error"
    assert "no candidate found" in prose["diagnosis"]
    assert module["index"] == 1 and module["reward"] == 0.0 and "does not define forward()" in module["diagnosis"]
