"""Template rendering: one Jinja2 environment (autoescape on), number formatting, and the security headers.

Everything a user sent (source, model names, tags, sampling, diagnosis text that quotes their code) reaches a
template as a plain string and is escaped by Jinja. The only markup marked safe is built here, from escaped
parts: Pygments' highlighted source (it escapes every token), the plots (numbers and escaped labels) and
`relative` (a number this module formats).
"""

from __future__ import annotations

import datetime as dt
from pathlib import Path
from typing import Any

from fastapi import Request
from fastapi.responses import HTMLResponse
from jinja2 import Environment, FileSystemLoader, StrictUndefined, select_autoescape
from markupsafe import Markup

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


def _env() -> Environment:
    env = Environment(loader=FileSystemLoader(TEMPLATES), autoescape=select_autoescape(["html"], default=True),
                      undefined=StrictUndefined, trim_blocks=True, lstrip_blocks=True, extensions=["jinja2.ext.do"])
    env.filters.update(ms=ms, speedup=speedup, relative=relative, shape=shape, percent=percent, mib=mib, when=when,
                       baseline_order=baseline_order)
    env.globals.update(CPU_NOTE=CPU_NOTE, BASELINES=BASELINES)
    return env


ENV = _env()


def page(request: Request, template: str, status_code: int = 200, **context: Any) -> HTMLResponse:
    """Render a page with the security headers; `context` values are escaped by the template."""
    html = ENV.get_template(template).render(request_path=request.url.path, **context)
    return HTMLResponse(html, status_code=status_code, headers=HEADERS)
