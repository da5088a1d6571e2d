"""Candidate extraction from raw LLM completions."""

import pytest

from sandbox.extract import ExtractionError, extract_candidate

MODULE = "import torch\nclass ModelNew(torch.nn.Module):\n    def forward(self, x):\n        return x\n"


def test_bare_module_is_taken_as_is():
    assert extract_candidate(MODULE) == MODULE


def test_last_python_block_defining_model_new_wins():
    first = MODULE.replace("return x", "return x + 1")
    text = (f"Draft:\n```python\n{first}```\nThen C++:\n```cpp\nint main() {{}}\n```\n"
            f"Final:\n```python\n{MODULE}```\nDone.")
    assert extract_candidate(text) == MODULE


def test_later_block_without_model_new_is_skipped():
    text = f"```python\n{MODULE}```\nUsage:\n```python\nm = ModelNew()\n```\n"
    assert extract_candidate(text) == MODULE


def test_untagged_and_py_fences_count_as_python():
    assert extract_candidate(f"```\n{MODULE}```") == MODULE
    assert extract_candidate(f"~~~py\n{MODULE}~~~") == MODULE


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "empty"),
        ("   \n", "empty"),
        ("```python\ndef f():\n    pass\n```", "none defines `class ModelNew"),
        ("here is my kernel: it is fast", "not valid Python"),
        ("import torch\nx = 1\n", "does not define"),
    ],
)
def test_no_candidate_gives_a_message_that_says_what_to_send(text, message):
    with pytest.raises(ExtractionError, match=message):
        extract_candidate(text)
