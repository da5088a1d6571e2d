"""The generation loop: sample N kernels for a task, judge them as a batch, refine the failures for R turns.

    turn 0   prompt ──> model ──> N completions ──> batch ──> verdicts
    turn 1   [prompt, completion, diagnosis] ──> model ──> completions of the non-correct ones ──> batch ...

Every turn is stored: each sample of turn t > 0 carries `parent_id` (the submission it refines) and `turn`,
so the server links the chain and a conversation can be replayed from the database. A conversation stops
at its first correct verdict; the loop stops after R refinement turns or when none is left to refine.
"""

from __future__ import annotations

import concurrent.futures
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from service.client import JudgeClient, models
from service.generation.chat import ChatClient, ChatError
from service.client.errors import NotFound, WaitTimeout
from service.generation.feedback import feedback_message, speedup_message


@dataclass
class GenerationConfig:
    task: str
    model: str
    language: str = "cuda"
    """The prompt's kernel language (service/prompts.py): `cpp` on a host without a GPU."""
    samples: int = 1
    turns: int = 0
    """Refinement turns after the first: 0 is plain best-of-N."""
    temperature: float | None = None
    max_tokens: int | None = None
    top_p: float | None = None
    name: str | None = None
    """Batch name prefix; each turn's batch is `<name>/turn-<t>`."""
    concurrency: int = 8
    """Chat requests in flight at once."""
    poll_s: float = 1.0
    timeout_s: float | None = None
    """Longest wait for one turn's batch."""
    profile: bool = False
    """Ask for each sample's Nsight Compute profile (GPU workers) and put its text in the next turn's message.
    A correct kernel then gets a next turn too: its time and profile, and the request to make it faster."""
    profile_timeout_s: float = 600.0
    """Longest wait for one sample's profile once its verdict is in (the worker takes it after the verdict)."""

    def sampling(self) -> dict[str, Any]:
        values = {"temperature": self.temperature, "max_tokens": self.max_tokens, "top_p": self.top_p}
        return {k: v for k, v in values.items() if v is not None}


@dataclass
class Conversation:
    """One sample's chain of turns: the messages so far and what the judge said of the last answer."""

    index: int
    messages: list[dict[str, str]]
    submission_ids: list[str] = field(default_factory=list)
    """This conversation's submission of each turn (what the next turn names as `parent_id`)."""
    judged_ids: list[str] = field(default_factory=list)
    """The submission whose verdict each turn got: its own, or the original it duplicates."""
    statuses: list[str] = field(default_factory=list)
    error: str | None = None
    """Set when the model endpoint failed for this conversation; it takes no further turns."""

    @property
    def solved(self) -> bool:
        """A correct kernel in some turn (with --profile a correct conversation goes on, to be made faster)."""
        return "correct" in self.statuses

    @property
    def parent_id(self) -> str | None:
        return self.submission_ids[-1] if self.submission_ids else None


@dataclass
class TurnSummary:
    turn: int
    batch_id: str | None
    samples: int
    verdicts: dict[str, int]
    solved_total: int
    """Conversations with a correct kernel after this turn (a pass@1-per-conversation count)."""
    failed_requests: int = 0


@dataclass
class GenerationReport:
    config: GenerationConfig
    conversations: list[Conversation]
    turns: list[TurnSummary]

    @property
    def solved(self) -> int:
        return sum(c.solved for c in self.conversations)


def run_generation(config: GenerationConfig, judge: JudgeClient, chat: ChatClient,
                   on_turn: Callable[[TurnSummary], None] | None = None,
                   on_batch: Callable[[models.Batch], None] | None = None) -> GenerationReport:
    """Run the loop; `on_turn` sees each turn's summary, `on_batch` every poll of the batch being judged."""
    prompt = judge.prompt(config.task, config.language)
    conversations = [Conversation(i, [{"role": "user", "content": prompt}]) for i in range(config.samples)]
    report = GenerationReport(config, conversations, [])
    active = conversations
    for turn in range(config.turns + 1):
        answered = _sample(config, chat, active)
        summary = _judge_turn(config, judge, turn, answered, on_batch)
        summary.failed_requests = len(active) - len(answered)
        summary.solved_total = sum(c.solved for c in conversations)
        report.turns.append(summary)
        if on_turn:
            on_turn(summary)
        ends = {"rejected"} if config.profile else {"rejected", "correct"}
        active = [c for c in answered if c.statuses[-1] not in ends]
        if not active or turn == config.turns:
            break
        _add_feedback(judge, active, config)
    return report


def _sample(config: GenerationConfig, chat: ChatClient, active: list[Conversation]) -> list[Conversation]:
    """One completion per active conversation, concurrently; appended as the assistant's message."""
    def ask(conv: Conversation) -> str:
        return chat.complete(conv.messages, model=config.model, **config.sampling())

    answered = []
    with concurrent.futures.ThreadPoolExecutor(max(1, config.concurrency)) as pool:
        futures = {pool.submit(ask, conv): conv for conv in active}
        for future in concurrent.futures.as_completed(futures):
            conv = futures[future]
            try:
                conv.messages.append({"role": "assistant", "content": future.result()})
                answered.append(conv)
            except ChatError as exc:
                conv.error = str(exc)
    if active and not answered:
        raise ChatError(f"every request to the model failed; the first: {active[0].error}")
    return sorted(answered, key=lambda c: c.index)


def _judge_turn(config: GenerationConfig, judge: JudgeClient, turn: int, answered: list[Conversation],
                on_batch: Callable[[models.Batch], None] | None) -> TurnSummary:
    samples = []
    for conv in answered:
        sample: dict[str, Any] = {"task": config.task, "completion": conv.messages[-1]["content"],
                                  "model": config.model, "sample_index": conv.index, "sampling": config.sampling(),
                                  "turn": turn, "metadata": {"conversation": conv.index, "turn": turn}}
        if conv.parent_id is not None:
            sample["parent_id"] = conv.parent_id
        if config.profile:
            sample["profile"] = True
        samples.append(sample)
    name = f"{config.name or config.task + '/' + config.model}/turn-{turn}"
    accepted = judge.create_batch(samples, name=name)
    judge.wait_batch(accepted.id, poll_s=config.poll_s, timeout=config.timeout_s, on_update=on_batch)
    # Rows follow upload lines (1-based); a line the server rejected has no submission and counts as failed.
    rows = {row.line: row for row in judge.results(accepted.id)}
    verdicts: Counter[str] = Counter()
    for line, conv in enumerate(answered, start=1):
        row = rows.get(line)
        if row is None or row.submission_id is None:
            conv.statuses.append("rejected")
            conv.error = conv.error or "the judge rejected the sample"
        else:
            conv.submission_ids.append(row.submission_id)
            conv.judged_ids.append(row.duplicate_of or row.submission_id)
            conv.statuses.append(row.status or "unknown")
        verdicts[conv.statuses[-1]] += 1
    return TurnSummary(turn=turn, batch_id=accepted.id, samples=len(answered), verdicts=dict(verdicts),
                       solved_total=0)


def _add_feedback(judge: JudgeClient, active: list[Conversation], config: GenerationConfig) -> None:
    """The diagnosis of each non-correct verdict becomes the next user message of its conversation; with
    `config.profile`, so does its profile's text, and a correct kernel is asked to be made faster."""
    for conv in active:
        if conv.parent_id is None:
            continue
        verdict = judge.submission(conv.judged_ids[-1]).verdict
        judged = verdict.model_dump(mode="json") if verdict is not None else {"status": conv.statuses[-1]}
        profile = _profile_text(judge, conv.judged_ids[-1], config) if config.profile else None
        content = (speedup_message(judged, profile) if judged.get("status") == "correct"
                   else feedback_message(judged, profile=profile))
        conv.messages.append({"role": "user", "content": content})


def _profile_text(judge: JudgeClient, submission_id: str, config: GenerationConfig) -> str | None:
    """The profile's text when one was taken; None while none exists (a CPU worker: "not available"), so the
    model is not told about tools it has no use for."""
    try:
        found = judge.wait_profile(submission_id, timeout=config.profile_timeout_s, poll_s=config.poll_s)
    except (NotFound, WaitTimeout):
        return None
    return found.text if found.status == "ok" else None
