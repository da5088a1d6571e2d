"""Candidate extraction from raw LLM completions."""

import ast
import random
import re
import time
from pathlib import Path

import pytest

from sandbox.extract import ExtractionError, extract_candidate, fenced_blocks

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


# --- the fence scanner against the pattern it replaces -------------------------------------------------------

OLD_FENCE = re.compile(r"^[ \t]*(```+|~~~+)[ \t]*([\w+-]*)[^\n]*\n(.*?)^[ \t]*\1[ \t]*$", re.S | re.M)
"""The backtracking pattern extraction used before the line scanner: quadratic in unclosed fences, kept here as
the oracle of what pairs with what (on inputs small enough for it)."""


def old_blocks(text: str) -> list[tuple[str, str]]:
    return [(m.group(2), m.group(3)) for m in OLD_FENCE.finditer(text)]


def old_extract(text: str) -> str:
    """extract_candidate as it was, on the old pattern (the oracle for the results, messages aside)."""
    blocks = [body for tag, body in old_blocks(text) if tag.lower() in {"", "python", "py", "python3"}]

    def defines(source: str) -> bool:
        try:
            tree = ast.parse(source)
        except SyntaxError:
            return False
        return any(isinstance(n, ast.ClassDef) and n.name == "ModelNew" for n in tree.body)

    for block in reversed(blocks):
        if defines(block):
            return block
    if defines(text):
        return text
    raise ExtractionError("none")


CORPUS = Path(__file__).resolve().parents[1] / "corpus"
CPP = "```cpp\n#include <torch/extension.h>\ntorch::Tensor f(torch::Tensor x) { return x; }\n```\n"
REALISTIC = [
    MODULE,
    f"Draft:\n```python\n{MODULE}```\nThen C++:\n{CPP}Final:\n```python\n{MODULE}```\nDone.",
    f"<think>\nThe kernel needs a reduction.\n```python\nx = 1\n```\n</think>\n\n```python\n{MODULE}```\n",
    f"Answer:\n```Python\n{MODULE}```",                       # tags are case-insensitive
    f"```python3 title=model.py\n{MODULE}```\n",               # text after the tag
    f"   ```py\n{MODULE}   ```   \n",                          # indented fences, trailing blanks
    f"````python\n{MODULE}```\n````\n",                        # a longer fence around a shorter one
    f"````python\n{MODULE}```\n",                              # a 4-fence closed by 3: opens as ``` + text
    f"````cpp\n{MODULE}```\n",                                 # ... so its tag is empty (python)
    f"```python\n{MODULE}",                                    # unclosed
    f"```python\n{MODULE}```",                                 # closer at the very end
    f"```python\n{MODULE}``` trailing\n```\n",                 # not a closer: text after the run
    f"~~~python\n{MODULE}```\n~~~\n",                          # tildes close only tildes
    f"```python\r\n{MODULE}```\r\n",                           # CRLF: the closer has \r, so it is not one
    f"```\n```\n```python\n{MODULE}```\n",                     # an empty block first
    f"```python\n{MODULE}```\n```python\n",                    # a trailing unclosed opener
    "no fences at all, just prose about kernels.\n",
    f"```python\nimport torch\n```\n```python\n{MODULE}\n```\n```\nplain\n```\n~~~\n~~~\n",
    f"Text ``` inline ``` fences\n```python\n{MODULE}```",
    f"\t```python\n{MODULE}\t```\n",
    f"```python-3 extra stuff\n{MODULE}```\n```c++\nint x;\n```\n",
    "```python\n```",                                          # the last line cannot open, but it closes
    "```",
    "```\n",
    "\n\n```\n\n```\n\n",
    *(p.read_text() for p in sorted((CORPUS / "cpu").glob("*"))),
]


def random_text(rng: random.Random) -> str:
    pieces = ["```", "````", "`````", "~~~", "~~~~", "``", "`", "~", " ", "\t", "\n", "\n", "\n", "python", "py",
              "cpp", "x", "+", "-", "é", "\r", "class ModelNew:\n    pass\n", "import torch\n"]
    return "".join(rng.choice(pieces) for _ in range(rng.randint(0, 60)))


@pytest.mark.parametrize("text", REALISTIC)
def test_the_scanner_pairs_fences_exactly_as_the_old_pattern(text):
    assert fenced_blocks(text) == old_blocks(text)
    try:
        expected = old_extract(text)
    except ExtractionError:
        with pytest.raises(ExtractionError):
            extract_candidate(text)
    else:
        assert extract_candidate(text) == expected


def test_the_scanner_agrees_with_the_old_pattern_on_random_texts():
    rng = random.Random(31)
    for _ in range(20_000):
        text = random_text(rng)
        assert fenced_blocks(text) == old_blocks(text), repr(text)
    for _ in range(2_000):
        text = random_text(rng)
        try:
            expected = old_extract(text)
        except ExtractionError:
            with pytest.raises(ExtractionError):
                extract_candidate(text)
        else:
            assert extract_candidate(text) == expected, repr(text)


MAX_SOURCE_BYTES = 262_144
"""The largest source the API accepts (JUDGE_MAX_SOURCE_BYTES's default)."""


@pytest.mark.parametrize("unit", ["```python\n", "````\n", "~~~py\n", "```\n````\n`````\n``````\n",
                                  "```" + "`" * 200 + "\n" + "```" * 10 + "\n"])
def test_a_fence_bomb_of_the_largest_accepted_size_extracts_at_once(unit):
    # Unclosed openers made the old pattern rescan to the end of the text for each: 134 s of CPU for this size.
    text = unit * (MAX_SOURCE_BYTES // len(unit))
    started = time.process_time()
    with pytest.raises(ExtractionError):
        extract_candidate(text)
    assert time.process_time() - started < 2.0  # linear: milliseconds; quadratic: minutes


def test_closers_of_every_length_under_long_openers_stay_linear():
    # Each opener may try every closing length up to its own: the runs' lengths pay for it, not the line count.
    closers = "".join("`" * k + "\n" for k in range(3, 400))
    text = ("`" * 400 + "x\n") * 300 + closers[::-1]
    text = text[:MAX_SOURCE_BYTES]
    started = time.process_time()
    fenced_blocks(text)
    assert time.process_time() - started < 2.0


@pytest.mark.parametrize("module", ["x = " + "+".join(["1"] * 20_000) + "\n", "x = " + "-" * 50_000 + "1\n"])
def test_a_module_too_deep_for_the_parser_is_a_diagnosis(module):
    with pytest.raises(ExtractionError, match="nested too deeply for Python's parser"):
        extract_candidate(module)
    with pytest.raises(ExtractionError, match=r"1 nested too deeply"):
        extract_candidate(f"```python\n{module}```\n")
    # A deep block before the answer does not hide it.
    assert extract_candidate(f"```python\n{MODULE}```\n```python\n{module}```\n") == MODULE
