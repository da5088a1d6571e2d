"""Template rendering: one Jinja2 environment (autoescape on), number formatting, and the security headers.

Everything a user sent (source, model names, tags, sampling, diagnosis text that quotes their code) reaches a
template as a plain string and is escaped by Jinja. The only markup marked safe is built here, from escaped
parts: Pygments' highlighted source (it escapes every token), the plots (numbers and escaped labels) and
`relative` (a number this module formats), and `mark_errors` (Pygments' markup with escaped compiler messages).
"""

from __future__ import annotations

import datetime as dt
import re
from pathlib import Path
from typing import Any

from fastapi import Request
from fastapi.responses import HTMLResponse
from jinja2 import Environment, FileSystemLoader, StrictUndefined, select_autoescape
from markupsafe import Markup, escape

from service.web.measured import CPU_NOTE

TEMPLATES = Path(__file__).resolve().parent / "templates"

CSP = ("default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; "
       "object-src 'none'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'")
"""Scripts and styles only from our own files: an injected <script> or inline handler cannot run."""

BASELINES = {"eager": "eager PyTorch", "compile": "torch.compile"}
"""The baselines' names as a reader knows them (verdicts key them "eager" and "compile")."""

HEADERS = {"Content-Security-Policy": CSP, "X-Content-Type-Options": "nosniff", "Referrer-Policy": "same-origin"}


def ms(value: float | None) -> str:
    if value is None:
        return "–"
    return f"{value:.4f}" if value < 10 else f"{value:.1f}"


def speedup(value: float | None) -> str:
    return "–" if value is None else f"{value:.2f}×"


def relative(value: float | None) -> Markup:
    """A speedup that says which way it goes: "1.20×" (faster), "0.20× (slower)"; bold is for the template,
    and only for the faster class (a slowdown is never shown as a best)."""
    if value is None:
        return Markup("–")
    text = f"{value:.2f}×"
    if text == "1.00×":
        return Markup(f'<span class="speedup even">{text} (as fast)</span>')
    if value < 1:
        return Markup(f'<span class="speedup slower">{text} (slower)</span>')
    return Markup(f'<span class="speedup faster">{text}</span>')


def baseline_order(mapping: dict[str, Any]) -> list[tuple[str, Any]]:
    """A dict keyed by baseline, eager first, then torch.compile, then any other by name."""
    rank = {name: i for i, name in enumerate(BASELINES)}
    return sorted(mapping.items(), key=lambda kv: (rank.get(kv[0], len(rank)), kv[0]))


def shape(value: list[int] | tuple[int, ...] | None) -> str:
    return "×".join(str(n) for n in value) if value else "–"


def percent(value: float | None) -> str:
    return "–" if value is None else f"{value * 100:.1f}%"


def mib(value: int | None) -> str:
    if value is None:
        return "–"
    if value >= 2**30:
        return f"{value / 2**30:,.2f} GiB"
    return f"{value / 2**20:,.1f} MiB" if value >= 2**20 else f"{value / 1024:,.0f} KiB"


def when(value: dt.datetime | None) -> str:
    return "–" if value is None else value.strftime("%Y-%m-%d %H:%M UTC")


_CODE = re.compile(r'(<td class="code"><div><pre><span></span><code>)(.*?)(</code></pre>)', re.S)
_LINENO = re.compile(r'<span class="normal">( *(\d+))</span>')
"""A line number of the table Pygments writes, padded to the widest one."""


def mark_errors(source: Markup, verdict: Any) -> Markup:
    """The highlighted source (service/web/highlight.py) with the lines a compile_error names marked: the line
    and its number get the class `hll compile-error` (pygments.css gives `hll` its background) and a title with
    the compiler's messages. Pygments closes every token's span at the end of its line, so wrapping one line's
    markup keeps the HTML whole; the messages are escaped here."""
    errors = getattr(verdict, "compile_errors", None) or []
    titles: dict[int, list[str]] = {}
    for error in errors:
        if error.sent_line is not None:
            titles.setdefault(error.sent_line, []).append(f"{error.location}: {error.message}")
    html = str(source)  # plain text from here on: Markup would escape what is added to it
    match = _CODE.search(html) if titles else None
    if match is None:
        return source

    def title(number: int) -> str:
        return str(escape("\n".join(titles[number])))

    lines = match.group(2).split("\n")
    for number in titles:
        if 0 < number <= len(lines):
            lines[number - 1] = f'<span class="hll compile-error" title="{title(number)}">{lines[number - 1]}</span>'
    code = match.group(1) + "\n".join(lines) + match.group(3)
    def number(m: re.Match) -> str:
        if int(m.group(2)) not in titles:
            return m.group(0)
        return f'<span class="normal hll compile-error" title="{title(int(m.group(2)))}">{m.group(1)}</span>'

    numbers = _LINENO.sub(number, html[:match.start()])
    return Markup(numbers + code + html[match.end():])


def _env() -> Environment:
    env = Environment(loader=FileSystemLoader(TEMPLATES), autoescape=select_autoescape(["html"], default=True),
                      undefined=StrictUndefined, trim_blocks=True, lstrip_blocks=True, extensions=["jinja2.ext.do"])
    env.filters.update(ms=ms, speedup=speedup, relative=relative, shape=shape, percent=percent, mib=mib, when=when,
                       baseline_order=baseline_order, mark_errors=mark_errors)
    env.globals.update(CPU_NOTE=CPU_NOTE, BASELINES=BASELINES)
    return env


ENV = _env()


def page(request: Request, template: str, status_code: int = 200, **context: Any) -> HTMLResponse:
    """Render a page with the security headers; `context` values are escaped by the template."""
    html = ENV.get_template(template).render(request_path=request.url.path, **context)
    return HTMLResponse(html, status_code=status_code, headers=HEADERS)
