"""Syntax highlighting of a candidate's source with Pygments, on the server.

Pygments escapes every token it emits (`&`, `<`, `>`, quotes), so its HTML is safe to embed even when the
source is an attack on the page; the XSS test in tests/web checks that. A raw LLM completion (markdown with
code blocks) is highlighted as markdown, a bare module as Python.
"""

from __future__ import annotations

from markupsafe import Markup
from pygments import highlight
from pygments.formatters import HtmlFormatter
from pygments.lexers import MarkdownLexer, PythonLexer

CSS_CLASS = "source"
_FORMATTER = HtmlFormatter(cssclass=CSS_CLASS, linenos="table", wrapcode=True)


def source_html(source: str) -> Markup:
    lexer = MarkdownLexer() if "```" in source else PythonLexer()
    return Markup(highlight(source, lexer, _FORMATTER))  # escaped token by token by Pygments


def stylesheet() -> str:
    """The CSS for the token classes; written once to static/pygments.css (see scripts in this package)."""
    return HtmlFormatter(style="friendly").get_style_defs(f".{CSS_CLASS}")
