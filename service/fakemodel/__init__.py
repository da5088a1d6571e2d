"""A fake model server for trying `kernel-judge generate` without an LLM: `kernel-judge fake-model --port 8100`.

It speaks OpenAI's chat-completions protocol (what `generate` calls) and answers the judge's own prompts with
kernels like those of tests/corpus: honest C++ for the CPU (`--language cpp` prompts) or CUDA (`cuda` prompts),
and a compile error on some first turns so the refinement loop has something to fix. A stand-in for a model
server, never a model: it recognises the judge's prompts and nothing else.
"""

from service.fakemodel.script import FakeModel
from service.fakemodel.server import create_app

__all__ = ["FakeModel", "create_app"]
