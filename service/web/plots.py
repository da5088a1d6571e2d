"""Plots as inline SVG, drawn on the server from numbers: no JavaScript, no plotting library.

Each function returns `Markup` built only from numbers this module formats and labels it escapes, so user
data can never become markup here. Sizes are in SVG user units; the CSS scales the SVG to the width of its
figure, so the text sizes in style.css (user units too) are chosen for the narrowest figure on a laptop
(about 540 px for 640 units: 15 units read as 13 px) and every axis says what it counts, in words.
"""

from __future__ import annotations

import datetime as dt
import math
from collections.abc import Sequence

import numpy as np
from markupsafe import Markup, escape

W, H = 640, 240
LEFT, RIGHT, TOP, BOTTOM = 60, 16, 20, 48
NAMES = 140
"""Width of the row names of `timing_boxes` ("eager PyTorch")."""


def _svg(body: list[str], label: str) -> Markup:
    head = (f'<svg class="plot" viewBox="0 0 {W} {H}" role="img" aria-label="{escape(label)}" '
            f'xmlns="http://www.w3.org/2000/svg"><title>{escape(label)}</title>')
    return Markup(head + "".join(body) + "</svg>")


def _nice_log_ticks(lo: float, hi: float) -> list[float]:
    ticks = []
    for exp in range(math.floor(math.log10(lo)), math.ceil(math.log10(hi)) + 1):
        for m in (1, 2, 5):
            t = m * 10**exp
            if lo <= t <= hi:
                ticks.append(t)
    return ticks


def _fmt(t: float) -> str:
    return f"{t:g}"


def _frame(body: list[str], x_label: str, y_label: str) -> None:
    body.append(f'<line class="axis" x1="{LEFT}" y1="{H - BOTTOM}" x2="{W - RIGHT}" y2="{H - BOTTOM}"/>')
    body.append(f'<line class="axis" x1="{LEFT}" y1="{TOP}" x2="{LEFT}" y2="{H - BOTTOM}"/>')
    body.append(f'<text class="label" x="{(LEFT + W - RIGHT) / 2}" y="{H - 6}" text-anchor="middle">'
                f'{escape(x_label)}</text>')
    body.append(f'<text class="label" x="16" y="{(TOP + H - BOTTOM) / 2}" text-anchor="middle" '
                f'transform="rotate(-90 16 {(TOP + H - BOTTOM) / 2})">{escape(y_label)}</text>')


def speedup_histogram(values: Sequence[float], label: str = "speedups of all correct submissions") -> Markup | None:
    """Counts of speedups in log-spaced bins (log x axis), with a line at 1× (as fast as eager PyTorch)."""
    logs = np.log10(np.asarray([v for v in values if v and v > 0], dtype=np.float64))  # every submission: numpy
    if not logs.size:
        return None
    lo, hi = min(10 ** float(logs.min()), 0.5), max(10 ** float(logs.max()), 2.0)
    lo, hi = 10 ** (math.floor(math.log10(lo) * 4) / 4), 10 ** (math.ceil(math.log10(hi) * 4) / 4)
    bins = 30
    span = math.log10(hi) - math.log10(lo)
    index = np.minimum(bins - 1, ((logs - math.log10(lo)) / span * bins).astype(np.int64))
    counts = np.bincount(index, minlength=bins).tolist()
    top = max(counts)
    plot_w, plot_h = W - LEFT - RIGHT, H - TOP - BOTTOM

    def x(v: float) -> float:
        return LEFT + (math.log10(v) - math.log10(lo)) / span * plot_w

    body: list[str] = []
    for i, c in enumerate(counts):
        if c:
            h = c / top * plot_h
            body.append(f'<rect class="bar" x="{LEFT + i * plot_w / bins + 0.5:.1f}" y="{H - BOTTOM - h:.1f}" '
                        f'width="{plot_w / bins - 1:.1f}" height="{h:.1f}"><title>{c}</title></rect>')
    for t in _nice_log_ticks(lo, hi):
        body.append(f'<line class="tick" x1="{x(t):.1f}" y1="{H - BOTTOM}" x2="{x(t):.1f}" y2="{H - BOTTOM + 4}"/>'
                    f'<text class="tick" x="{x(t):.1f}" y="{H - BOTTOM + 18}" text-anchor="middle">{_fmt(t)}×</text>')
    if lo <= 1 <= hi:
        body.append(f'<line class="ref" x1="{x(1):.1f}" y1="{TOP}" x2="{x(1):.1f}" y2="{H - BOTTOM}"/>'
                    f'<text class="ref" x="{x(1) + 4:.1f}" y="{TOP + 12}">as fast as eager</text>')
    body.append(f'<text class="tick" x="{LEFT - 6}" y="{TOP + 8}" text-anchor="end">{top}</text>'
                f'<text class="tick" x="{LEFT - 6}" y="{H - BOTTOM}" text-anchor="end">0</text>')
    _frame(body, "speedup vs eager PyTorch (log scale; left of 1× is slower)", "submissions")
    return _svg(body, label)


def best_over_time(points: Sequence[tuple[dt.datetime, float]], now: dt.datetime,
                   label: str = "best time over time") -> Markup | None:
    """A step line of the best median time as records fell, up to `now` (y: ms, linear from 0)."""
    if not points:
        return None
    t0, t1 = points[0][0], max(now, points[-1][0])
    span = max((t1 - t0).total_seconds(), 1.0)
    top = max(ms for _, ms in points) * 1.1
    plot_w, plot_h = W - LEFT - RIGHT, H - TOP - BOTTOM

    def x(t: dt.datetime) -> float:
        return LEFT + (t - t0).total_seconds() / span * plot_w

    def y(v: float) -> float:
        return H - BOTTOM - v / top * plot_h

    # A step line: hold each record level until the next record, then drop to it.
    path = [f"M{x(points[0][0]):.1f} {y(points[0][1]):.1f}"]
    path += [f"H{x(t):.1f} V{y(v):.1f}" for t, v in points[1:]]
    path.append(f"H{x(t1):.1f}")
    body = [f'<path class="line" d="{" ".join(path)}"/>']
    for t, v in points:
        body.append(f'<circle class="dot" cx="{x(t):.1f}" cy="{y(v):.1f}" r="3">'
                    f'<title>{v:.4f} ms, {t:%Y-%m-%d %H:%M}</title></circle>')
    for frac in (0.0, 0.5, 1.0):
        v = top * frac
        body.append(f'<text class="tick" x="{LEFT - 6}" y="{y(v) + 4:.1f}" text-anchor="end">{v:.3g}</text>')
    body.append(f'<text class="tick" x="{LEFT}" y="{H - BOTTOM + 18}">{t0:%Y-%m-%d}</text>'
                f'<text class="tick" x="{W - RIGHT}" y="{H - BOTTOM + 18}" text-anchor="end">{t1:%Y-%m-%d}</text>')
    _frame(body, f"submission date ({len(points)} records)", "best median (ms)")
    return _svg(body, label)


def timing_boxes(rows: Sequence[tuple[str, float, float, float, float]], label: str = "timing distribution"
                 ) -> Markup | None:
    """Box plots on a log time axis: (name, min, q25, median, q75) per row, e.g. candidate, eager, compile."""
    rows = [r for r in rows if r[1] > 0]
    if not rows:
        return None
    lo = min(r[1] for r in rows) / 1.3
    hi = max(r[4] for r in rows) * 1.3
    span = math.log10(hi) - math.log10(lo)
    row_h = 40
    height = TOP + row_h * len(rows) + BOTTOM
    plot_w = W - NAMES - RIGHT - 70  # room right of the slowest box for its median's label

    def x(v: float) -> float:
        return NAMES + (math.log10(v) - math.log10(lo)) / span * plot_w

    body = []
    for i, (name, mn, q25, med, q75) in enumerate(rows):
        cy = TOP + row_h * i + row_h / 2
        body.append(f'<text class="label" x="{NAMES - 6}" y="{cy + 5:.1f}" text-anchor="end">{escape(name)}</text>'
                    f'<line class="whisker" x1="{x(mn):.1f}" y1="{cy}" x2="{x(q25):.1f}" y2="{cy}"/>'
                    f'<rect class="box{" cand" if i == 0 else ""}" x="{x(q25):.1f}" y="{cy - 10:.1f}" '
                    f'width="{max(x(q75) - x(q25), 1.5):.1f}" height="20"/>'
                    f'<line class="median" x1="{x(med):.1f}" y1="{cy - 12:.1f}" x2="{x(med):.1f}" y2="{cy + 12:.1f}"/>'
                    f'<text class="tick" x="{x(q75) + 6:.1f}" y="{cy + 4:.1f}">{med:.4g} ms</text>')
    axis_y = height - BOTTOM
    body.append(f'<line class="axis" x1="{NAMES}" y1="{axis_y}" x2="{W - RIGHT}" y2="{axis_y}"/>')
    for t in _nice_log_ticks(lo, hi):
        body.append(f'<text class="tick" x="{x(t):.1f}" y="{axis_y + 18}" text-anchor="middle">{_fmt(t)}</text>')
    body.append(f'<text class="label" x="{W / 2}" y="{height - 6}" text-anchor="middle">'
                f'ms per call, log scale · box: IQR · whisker: fastest call</text>')
    svg = _svg(body, label)
    return Markup(str(svg).replace(f'viewBox="0 0 {W} {H}"', f'viewBox="0 0 {W} {height}"', 1))


def bars(values: Sequence[tuple[str, float | None]], label: str, y_label: str = "fraction", x_label: str = ""
         ) -> Markup | None:
    """Vertical bars of fractions in [0, 1] (fast_p at several thresholds, pass@k), each named under its bar."""
    values = [(name, v) for name, v in values if v is not None]
    if not values:
        return None
    plot_w, plot_h = W - LEFT - RIGHT, H - TOP - BOTTOM
    slot = plot_w / len(values)
    half = min(slot * 0.35, 48)  # one or two bars stay bars, not a wall
    body = []
    for i, (name, v) in enumerate(values):
        h = max(0.0, min(1.0, v)) * plot_h
        cx = LEFT + slot * (i + 0.5)
        body.append(f'<rect class="bar" x="{cx - half:.1f}" y="{H - BOTTOM - h:.1f}" width="{2 * half:.1f}" '
                    f'height="{h:.1f}"/><text class="tick" x="{cx:.1f}" y="{H - BOTTOM - h - 4:.1f}" '
                    f'text-anchor="middle">{v:.2f}</text><text class="tick" x="{cx:.1f}" y="{H - BOTTOM + 18}" '
                    f'text-anchor="middle">{escape(name)}</text>')
    body.append(f'<text class="tick" x="{LEFT - 6}" y="{TOP + 8}" text-anchor="end">1</text>'
                f'<text class="tick" x="{LEFT - 6}" y="{H - BOTTOM}" text-anchor="end">0</text>')
    _frame(body, x_label, y_label)
    return _svg(body, label)
