"""What the fake model answers: the task and language read from the judge's prompt, a kernel for them.

The first turn of every `compile_error_every`-th conversation gets a kernel that does not compile, so that
`generate --turns 1` shows the loop at work: the judge's diagnosis goes back, and any later turn gets the
honest kernel. The prompt is recognised by the task's problem source and the language's phrase, both as
service/prompts.py writes them; anything else is answered with a sentence and no code (the judge's verdict
for an answer without a candidate), so a user pointing `generate` at a prompt it does not know sees why.
"""

from __future__ import annotations

import threading

from reference import all_tasks
from service.fakemodel.kernels import KERNELS, broken
from service.prompts import KERNELS as PHRASES

KNOWN = ", ".join(sorted({f"{task} ({language})" for task, language in KERNELS}))


def completion(code: str, reasoning: str) -> str:
    """A raw LLM-style answer: some prose, then the candidate in a ```python block."""
    return f"{reasoning}\n\n```python\n{code}```\n"


def recognise(prompt: str) -> tuple[str, str] | None:
    """(task id, language) of one of the judge's prompts, or None."""
    # A training task's prompt holds its forward task's problem and a statement of its own: those are tried first.
    tasks = sorted(all_tasks(), key=lambda t: t.training is None)
    task = next((t.id.value for t in tasks if t.problem_source.rstrip() in prompt
                 and (t.training is None or t.training.statement in prompt)), None)
    language = next((lang for lang, phrase in PHRASES.items() if prompt.startswith(f"You write {phrase}")), None)
    return (task, language) if task and language else None


class FakeModel:
    """The script; one per server, shared by its request threads."""

    def __init__(self, compile_error_every: int = 2) -> None:
        self.compile_error_every = compile_error_every
        """Every n-th first turn gets a kernel that does not compile (the 1st, the n+1-th, ...); 0: none."""
        self.first_turns = 0
        self._lock = threading.Lock()

    def answer(self, messages: list[dict[str, str]]) -> str:
        prompt = next((m["content"] for m in messages if m["role"] == "user"), "")
        found = recognise(prompt)
        if found is None or found not in KERNELS:
            return (f"I am kernel-judge's fake model: I only answer the judge's own prompts for {KNOWN} "
                    "(`kernel-judge prompt TASK --language LANG`), so here is no kernel.")
        kernel = KERNELS[found]
        if any(m["role"] == "assistant" for m in messages):
            return completion(kernel, "The judge's diagnosis points at my last kernel; here it is, fixed.")
        with self._lock:
            n, self.first_turns = self.first_turns, self.first_turns + 1
        if self.compile_error_every and n % self.compile_error_every == 0:
            return completion(broken(kernel), "A scaled reduction should be faster.")
        return completion(kernel, "A single pass with fp64 accumulation.")
