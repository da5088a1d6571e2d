"""The submission page marks the source lines a compile_error names (the verdict's `compile_errors`, each at its
`sent_line`: the line in the text as sent), only where the source is shown at all. Over HTTP: the marked line is
in the page's HTML, with the compiler's message, escaped, as its title."""

from __future__ import annotations

import re

import httpx

from sandbox.verdict import Status

HOSTILE = "<img src=x onerror=alert(1)>"
CODE = ('import torch\nfrom torch.utils.cpp_extension import load_inline\n\ncpp = """\n'
        "torch::Tensor f(torch::Tensor x) {\n    int broken = 1 +;\n    return x;\n}\n"
        '"""\n\nclass ModelNew:\n    pass\n')
PROSE = "Here is my kernel.\n\n```python\n"
SENT = f"{PROSE}{CODE}```\n"
FILE_LINE = CODE.split("\n").index("    int broken = 1 +;") + 1
SENT_LINE = FILE_LINE + PROSE.count("\n")
ERRORS = [{"file_line": FILE_LINE, "sent_line": SENT_LINE, "location": "main.cpp:3:22",
           "message": f"expected primary-expression before ';' token {HOSTILE}", "kind": "syntax",
           "code": "int broken = 1 +;"},
          {"file_line": None, "sent_line": None, "location": "Exception.h:12:3", "message": "in a header",
           "kind": "other"}]
MARKED = re.compile(r'<span class="hll compile-error" title="(?P<title>[^"]*)">(?P<line>.*?)</span>\n')


def _compile_error(seed, public: bool) -> str:  # noqa: ANN001
    return seed.add("ann", "model-a", CODE, None, source=SENT, public=public, status=Status.COMPILE_ERROR.value,
                    diagnosis=f"the extension failed to compile:\ncandidate.py line {FILE_LINE}: main.cpp:3:22: ...",
                    compile_errors=ERRORS)


def test_the_line_a_compile_error_names_is_marked_on_the_source(site) -> None:  # noqa: ANN001
    base, seed = site
    html = httpx.get(f"{base}/submissions/{_compile_error(seed, public=True)}").text
    marked = MARKED.findall(html)
    assert len(marked) == 1, html
    title, line = marked[0]
    assert "broken" in line and "1" in line  # the line as sent: the prose before the code block counted
    assert title.startswith("main.cpp:3:22: expected primary-expression") and "&lt;img src=x" in title
    assert HOSTILE not in html
    number = re.search(rf'<span class="normal hll compile-error" title="[^"]*"> *{SENT_LINE}</span>', html)
    assert number is not None, html
    assert "marked on their lines below" in html


def test_a_private_source_shows_no_line(site) -> None:  # noqa: ANN001
    base, seed = site
    html = httpx.get(f"{base}/submissions/{_compile_error(seed, public=False)}").text
    assert "compile-error" not in html and "int broken" not in html
    assert "private to its submitter" in html
