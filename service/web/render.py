"""Template rendering: one Jinja2 environment (autoescape on), number formatting, and the security headers.

Everything a user sent (source, model names, tags, sampling, diagnosis text that quotes their code) reaches a
template as a plain string and is escaped by Jinja. The only markup marked safe is built here, from escaped
parts: Pygments' highlighted source (it escapes every token) and the plots (numbers and escaped labels).
"""

from __future__ import annotations

import datetime as dt
from pathlib import Path
from typing import Any

from fastapi import Request
from fastapi.responses import HTMLResponse
from jinja2 import Environment, FileSystemLoader, StrictUndefined, select_autoescape

TEMPLATES = Path(__file__).resolve().parent / "templates"

CSP = ("default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; "
       "object-src 'none'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'")
"""Scripts and styles only from our own files: an injected <script> or inline handler cannot run."""

HEADERS = {"Content-Security-Policy": CSP, "X-Content-Type-Options": "nosniff", "Referrer-Policy": "same-origin"}


def ms(value: float | None) -> str:
    if value is None:
        return "–"
    return f"{value:.4f}" if value < 10 else f"{value:.1f}"


def speedup(value: float | None) -> str:
    return "–" if value is None else f"{value:.2f}×"


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
    env.filters.update(ms=ms, speedup=speedup, percent=percent, mib=mib, when=when)
    return env


ENV = _env()


def page(request: Request, template: str, status_code: int = 200, **context: Any) -> HTMLResponse:
    """Render a page with the security headers; `context` values are escaped by the template."""
    html = ENV.get_template(template).render(request_path=request.url.path, **context)
    return HTMLResponse(html, status_code=status_code, headers=HEADERS)
