"""Syntax highlighting of a candidate's source with Pygments, on the server, within a budget of bytes and CPU time.

Pygments escapes every token it emits (`&`, `<`, `>`, quotes), so its HTML is safe to embed even when the
source is an attack on the page; the XSS test in tests/web checks that. A raw LLM completion (markdown with
code blocks) is highlighted as markdown, a bare module as Python.

Cost is bounded whatever the source: Pygments' Markdown lexer is quadratic on some texts (an unclosed code
fence makes every later fence scan to the end of the text), so a 256 KB public source of "```\\n[a](" repeated
took 37.6 s of CPU per anonymous view. A source over HIGHLIGHT_MAX_BYTES, or whose lexing passes
HIGHLIGHT_CPU_S of this thread's CPU time, is shown as plain escaped text, still numbered line by line (the
same table, so compile errors are still marked on their lines). The budget is checked between tokens: one
token costs at most one scan of the text (about 1 ms at 256 KB), so a view costs at most the budget plus that,
plus the plain rendering (linear). The figures are in docs/reliability.md
(`python -m scripts.experiments.highlight_cost`). A view whose client has left stops between two checks
(`gone`, service/web/disconnect.py) instead of spending the rest of its budget for nobody.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from markupsafe import Markup
from pygments import format as format_tokens
from pygments.formatters import HtmlFormatter
from pygments.lexer import Lexer
from pygments.lexers import MarkdownLexer, PythonLexer, TextLexer

CSS_CLASS = "source"
_FORMATTER = HtmlFormatter(cssclass=CSS_CLASS, linenos="table", wrapcode=True)

HIGHLIGHT_MAX_BYTES = 256 * 1024
"""The largest source (UTF-8 bytes) worth trying: the default JUDGE_MAX_SOURCE_BYTES. Honest sources of that
size lex in 0.12-0.14 s; a larger one (an operator's raised limit) would spend the budget and fall back anyway."""
HIGHLIGHT_CPU_S = 0.5
"""CPU seconds of lexing before the page gives up on colour: about 4x what the largest honest source takes on
the 2-core development machine, and a quarter of the 2 s a whole view may cost (issue 41)."""
_CHECK_EVERY = 64
"""Tokens between two reads of the thread's CPU clock (a read costs about a microsecond; 64 tokens of an honest
source, about 0.2 ms)."""
Token = tuple[object, str]
"""(Pygments token type, text), as a lexer yields them."""


def _lexer_for(source: str) -> Lexer:
    return MarkdownLexer() if "```" in source else PythonLexer()


class Abandoned(Exception):
    """The reader left (`gone()` answered True) while the source was being rendered: the work stopped there."""


def _never() -> bool:
    return False


def tokens_within(source: str, lexer: Lexer, cpu_s: float, gone: Callable[[], bool] = _never) -> list[Token] | None:
    """The lexer's tokens for `source`, or None once lexing has used `cpu_s` of this thread's CPU time. Raises
    Abandoned as soon as `gone()` says nobody waits for them (asked with the CPU clock, every _CHECK_EVERY tokens)."""
    deadline = time.thread_time() + cpu_s
    tokens: list[Token] = []
    for token in lexer.get_tokens(source):
        tokens.append(token)
        if len(tokens) % _CHECK_EVERY == 0:
            if time.thread_time() > deadline:
                return None
            if gone():
                raise Abandoned
    return tokens


def source_html(source: str, *, max_bytes: int = HIGHLIGHT_MAX_BYTES, cpu_s: float | None = None,
                gone: Callable[[], bool] = _never) -> Markup:
    """The source as a numbered table of lines: highlighted where the budget allows (`cpu_s`, None:
    HIGHLIGHT_CPU_S), else plain escaped text. `gone`: whether the reader has left (service/web/disconnect.py);
    once it has, Abandoned is raised instead of finishing the work."""
    tokens = None
    if len(source.encode("utf-8", "surrogatepass")) <= max_bytes:
        tokens = tokens_within(source, _lexer_for(source), HIGHLIGHT_CPU_S if cpu_s is None else cpu_s, gone)
    if gone():
        raise Abandoned
    if tokens is None:
        tokens = list(TextLexer().get_tokens(source))
    return Markup(format_tokens(tokens, _FORMATTER))  # escaped token by token by Pygments


def stylesheet() -> str:
    """The CSS for the token classes; written once to static/pygments.css (see scripts in this package)."""
    return HtmlFormatter(style="friendly").get_style_defs(f".{CSS_CLASS}")
