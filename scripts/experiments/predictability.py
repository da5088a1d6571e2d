"""Partial reads against the judge's inputs (issue 25, point 3): can a kernel that reads all of one input and a
fraction f of the other estimate the loss inside the tolerance?

For each task, distribution and seed: the inputs at a shape, one input read whole and a fraction f of the other
(0.1%, 1%, 10%) read in one of four ways, the rest estimated by each estimator below, and |estimate - truth|
over the task's tolerance (atol + rtol * |truth|): under 1 the estimate passes. The table gives, for each way
of reading and each f, the best estimator (lowest median over seeds), its median and smallest ratio, and on
how many seeds it passed; the detailed table gives every estimator's median.

Readers: kl_div "targets" (all targets, part of the predictions: the issue's attack), kl_div "predictions"
(all predictions, part of the targets), cross_entropy "targets" (all targets, part of the logits).
Ways of reading the partial input: `rows` (a random fraction of the rows, whole), `columns` (a random
fraction of the columns, in every row), `cells` (random cells), `marked` (the cells the whole input marks:
kl_div's largest targets, or smallest predictions; cross_entropy's target logits plus random cells).
Estimators (attackers that know the distributions' laws, which are public in reference/):
- `official law`: the official distribution's law for the unread part (kl_div: softmax(s U) with s fitted
  to the read values; cross_entropy: logsumexp = log(C (e - 1))). The attack on the old planted inputs.
- `row ratio` (kl_div): the unread part of each row in the same ratio to the whole input as the row's read
  cells (exact where one input is the other rescaled, as in near-identical rows).
- `row entries` (cross_entropy): each row's logsumexp from its read logits, scaled to the row.
- `row mean` (kl_div, targets reader): unread log-predictions = the row's mean read one.
- `scale-up`: each row's loss over its read cells, scaled by the share read (whole rows: their mean).
- `planted law`: `row ratio` / `row entries`, the hidden cells seen taken exactly, the unseen ones added
  at the rate and size seen (the planted distributions' law: a random count of cells at random positions).

    python scripts/experiments/predictability.py --device cuda --seeds 64     # official shapes
    python scripts/experiments/predictability.py --device cpu --kl-shape 256x4096 --ce-shape 512x4096 --seeds 8

tests/reference/test_planted.py runs the same estimators at CPU sizes.
"""

from __future__ import annotations

import argparse
import math
import statistics
import sys
import time
from dataclasses import dataclass
from typing import Callable

import torch
from torch import Tensor

from reference import OFFICIAL, Task, get_task

FRACTIONS = (0.001, 0.01, 0.1)
MODES = ("rows", "columns", "cells", "marked")
DEEP = -5.0
"""A read cell whose log ratio to the other input is this far under its row's is one of the pushed-down ones."""
BUMP = 1.0
"""A target logit this far over its row's official range [c, c + 1) (half of it, for the targets reader, which
sees every target) is one of the raised ones (raised by 2..4)."""
PEAK = 5.0
"""A cross_entropy logit over this (official ones are < 1) is a planted one."""


@dataclass(frozen=True)
class Reader:
    """Which task, which input is read whole, and the estimators of the loss from a partial read of the other."""

    task: str
    whole: str
    estimators: dict[str, Callable[..., float]]


def read_mask(mode: str, fraction: float, marks: torch.Tensor, g: torch.Generator) -> torch.Tensor:
    """The cells of the partial input that are read: a bool (rows, cols) tensor on marks' device.

    `marks`: per-cell scores from the whole input; `marked` reads each row's highest-scoring ceil(f * cols) cells."""
    rows, cols = marks.shape
    device = marks.device
    if mode == "rows":
        mask = torch.zeros(rows, cols, dtype=torch.bool, device=device)
        mask[torch.randperm(rows, generator=g, device=device)[:max(1, round(fraction * rows))]] = True
    elif mode == "columns":
        mask = torch.zeros(rows, cols, dtype=torch.bool, device=device)
        mask[:, torch.randperm(cols, generator=g, device=device)[:max(1, round(fraction * cols))]] = True
    elif mode == "cells":
        mask = torch.rand(rows, cols, generator=g, device=device) < fraction
    else:
        k = max(1, math.ceil(fraction * cols))
        mask = torch.zeros(rows, cols, dtype=torch.bool, device=device)
        mask.scatter_(1, marks.topk(k, dim=1).indices, True)
    return mask


def _row_mean(values: torch.Tensor, mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(mean of values over each row's masked cells, whether the row has any); rows without any get the mean of
    the others' means."""
    n = mask.sum(1)
    mean = torch.where(mask, values, 0.0).sum(1) / n.clamp_min(1)
    has = n > 0
    fallback = mean[has].mean() if bool(has.any()) else torch.zeros((), dtype=mean.dtype, device=mean.device)
    return torch.where(has, mean, fallback), has


# --- kl_div, all targets read ------------------------------------------------------------------------------

def _kl(t: torch.Tensor, lt: torch.Tensor, lp: torch.Tensor) -> float:
    return float((torch.xlogy(t, t) - t * lp).sum() / t.shape[0])


def kl_targets_official(t: Tensor, lt: Tensor, lp: Tensor, mask: Tensor) -> float:
    # Official predictions: log p = s u - log(C (e^s - 1) / s), u ~ U[0, 1); s from the read values' ranges.
    cols = t.shape[1]
    spread = torch.where(mask, lp, -math.inf).amax(1) - torch.where(mask, lp, math.inf).amin(1)
    n = mask.sum(1)
    ok = n >= 2
    s = float((spread[ok] * (n[ok] + 1) / (n[ok] - 1)).median()) if bool(ok.any()) else 0.5
    s = max(s, 1e-6)
    expected = s / 2 - math.log(cols * math.expm1(s) / s)
    return _kl(t, lt, torch.where(mask, lp, expected))


def kl_targets_ratio(t: Tensor, lt: Tensor, lp: Tensor, mask: Tensor, deep_aware: bool = False) -> float:
    r = lp - lt
    if not deep_aware:
        ratio, _ = _row_mean(r, mask)
        return _kl(t, lt, torch.where(mask, lp, lt + ratio[:, None]))
    # Planted law: targets raised where the predictions are not (the targets show where: a log t more than
    # BUMP / 2 over its row's official range [c, c + 1), raised by ~its excess less E[U] = 1/2) and predictions
    # pushed down at random cells (the read ones show the rate and the depth). The ratio from the other cells.
    above = lt - lt.amin(1, keepdim=True)
    raised = above > 1 + BUMP / 2
    first, _ = _row_mean(r, mask & ~raised)
    ratio, _ = _row_mean(r, mask & ~raised & (r > first[:, None] + DEEP))
    estimate = _kl(t, lt, torch.where(mask, lp, lt + ratio[:, None]))
    estimate += float(torch.where(raised & ~mask, t * (above - 0.5), 0.0).sum() / t.shape[0])
    deep = mask & ~raised & (r < ratio[:, None] + DEEP)
    if bool(deep.any()):
        depth = float((ratio[:, None] - r)[deep].mean())
        rate = float(deep.sum()) / float(mask.sum())
    else:  # none seen: the law's expected count, R/32..R/8 cells, at the law's mean depth
        depth, rate = 37.5, (1 / 32 + 1 / 8) / 2 / t.shape[1]
    return estimate + rate * depth * float((t * ~mask).sum()) / t.shape[0]


def kl_targets_row_mean(t: Tensor, lt: Tensor, lp: Tensor, mask: Tensor) -> float:
    mean, _ = _row_mean(lp, mask)
    return _kl(t, lt, torch.where(mask, lp, mean[:, None]))


def kl_targets_scale_up(t: Tensor, lt: Tensor, lp: Tensor, mask: Tensor) -> float:
    terms = torch.where(mask, torch.xlogy(t, t) - t * lp, 0.0)
    share = torch.where(mask, t, 0.0).sum(1)
    has = share > 0
    rows = terms.sum(1) / share.clamp_min(1e-300)
    return float(torch.where(has, rows, rows[has].mean()).mean())


# --- kl_div, all predictions read ----------------------------------------------------------------------------

def _kl_estimated_targets(lp: torch.Tensor, lt: torch.Tensor) -> float:
    t = lt.exp()
    return float((t * (lt - lp)).sum() / lt.shape[0])


def kl_predictions_ratio(p: Tensor, lp: Tensor, lt: Tensor, mask: Tensor, law: bool = False) -> float:
    r = lt - lp
    if not law:
        ratio, _ = _row_mean(r, mask)
        return _kl_estimated_targets(lp, torch.where(mask, lt, lp + ratio[:, None]))
    # Planted law: pushed-down predictions (visible: far under their row) have ordinary targets; the other
    # unread targets are the predictions times the row's ratio, which makes the row's targets sum to 1 (read
    # in order of the predictions, the read cells' own ratio would be biased).
    deep = lp < lp.median(1, keepdim=True).values + DEEP
    unread = ~mask
    left = 1.0 - torch.where(mask, lt.exp(), 0.0).sum(1, keepdim=True)
    typical = left / unread.sum(1, keepdim=True).clamp_min(1)
    ordinary = torch.where(unread & ~deep, p, 0.0).sum(1, keepdim=True)
    ratio = torch.log((left - typical * (unread & deep).sum(1, keepdim=True)).clamp_min(1e-300) / ordinary)
    estimate = torch.where(mask, lt, torch.where(deep, typical.log(), lp + ratio))
    ratio = ratio.squeeze(1)
    value = _kl_estimated_targets(lp, estimate)
    # Unseen raised targets at the rate and size of those seen among the read cells that are not pushed-down
    # predictions (reading those first says nothing of the raised targets); none seen: the law's rate and size,
    # R/48..R/12 cells adding ~55.6 / C each (E[(b - 1) e^b + 1] for b ~ U(2, 4), in a row of C entries).
    sample = mask & ~deep
    raised = sample & (r > ratio[:, None] + BUMP)
    cols = lp.shape[1]
    if bool(raised.any()):
        t = lt.exp()
        extra = float((t * (lt - lp) - (lp + ratio[:, None]).exp() * ratio[:, None])[raised].mean())
        rate = float(raised.sum()) / float(sample.sum())
    else:
        extra, rate = 55.6 / cols, (1 / 48 + 1 / 12) / 2 / cols
    return value + rate * extra * float((~mask & ~deep).sum()) / lp.shape[0]


def kl_predictions_scale_up(p: Tensor, lp: Tensor, lt: Tensor, mask: Tensor) -> float:
    terms = torch.where(mask, lt.exp() * (lt - lp), 0.0)
    share = torch.where(mask, p, 0.0).sum(1)
    has = share > 0
    rows = terms.sum(1) / share.clamp_min(1e-300)
    return float(torch.where(has, rows, rows[has].mean()).mean())


# --- cross_entropy, all targets read -------------------------------------------------------------------------

def _ce(lse: torch.Tensor, picked: torch.Tensor) -> float:
    return float((lse - picked).mean())


def _picked(x: torch.Tensor, y: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """The target logit where it was read, else its row's mean read logit (0.5 where nothing was)."""
    seen = mask.gather(1, y[:, None]).squeeze(1)
    mean, _ = _row_mean(x, mask)
    return torch.where(seen, x.gather(1, y[:, None]).squeeze(1), mean)


def ce_official(x: Tensor, y: Tensor, mask: Tensor) -> float:
    return _ce(torch.full_like(x[:, 0], math.log(x.shape[1] * (math.e - 1.0))), _picked(x, y, mask))


def ce_row_entries(x: Tensor, y: Tensor, mask: Tensor, law: bool = False) -> float:
    rows, cols = x.shape
    n = mask.sum(1)
    peak = mask & (x > PEAK) if law else torch.zeros_like(mask)
    ordinary = mask & ~peak
    m = ordinary.sum(1)
    scale = torch.log((cols - peak.sum(1)) / m.clamp_min(1))  # the read ordinary logits stand for all but the peaks
    lse_read = torch.logsumexp(torch.where(ordinary, x, -math.inf), 1) + scale
    lse_peak = torch.logsumexp(torch.where(peak, x, -math.inf), 1)
    lse = torch.logaddexp(lse_read, lse_peak)
    has = m > 0
    lse = torch.where(has, lse, lse[has].mean())
    value = _ce(lse, _picked(x, y, mask))
    if law:
        seen = peak.any(1)
        if bool(seen.any()):  # a planted row has one hidden logit: unseen ones at the rate and size of the seen
            extra = float((lse - torch.logsumexp(torch.where(ordinary, x, -math.inf), 1) - torch.log(
                (cols - 1) / m.clamp_min(1)))[seen].mean())
            rate = float(peak.sum()) / float(n.sum())
        else:
            extra, rate = 29.5, (1 / 1024 + 1 / 64) / 2 / cols
        value += rate * extra * float((cols - n)[~seen].sum()) / rows
    return value


def ce_scale_up(x: Tensor, y: Tensor, mask: Tensor) -> float:
    whole = mask.all(1)
    if bool(whole.any()):
        xr = x[whole]
        return float((torch.logsumexp(xr, 1) - xr.gather(1, y[whole][:, None]).squeeze(1)).mean())
    return ce_row_entries(x, y, mask)


READERS = {
    ("kl_div", "targets"): Reader("kl_div", "targets", {
        "official law": kl_targets_official, "row ratio": kl_targets_ratio, "row mean": kl_targets_row_mean,
        "scale-up": kl_targets_scale_up,
        "planted law": lambda t, lt, lp, mask: kl_targets_ratio(t, lt, lp, mask, deep_aware=True)}),
    ("kl_div", "predictions"): Reader("kl_div", "predictions", {
        "row ratio": kl_predictions_ratio, "scale-up": kl_predictions_scale_up,
        "planted law": lambda p, lp, lt, mask: kl_predictions_ratio(p, lp, lt, mask, law=True)}),
    ("cross_entropy", "targets"): Reader("cross_entropy", "targets", {
        "official law": ce_official, "row entries": ce_row_entries, "scale-up": ce_scale_up,
        "planted law": lambda x, y, mask: ce_row_entries(x, y, mask, law=True)}),
}


def prepare(reader: Reader, inputs: list[torch.Tensor]) -> tuple[torch.Tensor, ...]:
    """The inputs in fp64 (and their logarithms), once per seed for every way of reading."""
    if reader.task == "kl_div":
        p, t = (x.double() for x in inputs)
        return p, t, p.log(), torch.where(t > 0, t.log(), -math.inf)
    return inputs[0].double(), inputs[1]


def errors(reader: Reader, prepared: tuple[torch.Tensor, ...], tolerance: float, truth: float, mode: str,
           fraction: float, g: torch.Generator) -> dict[str, float]:
    """|estimate - truth| / tolerance for every estimator of `reader`, one partial read. Each estimator sees the
    partial input only where it was read (NaN elsewhere)."""
    if reader.task == "kl_div":
        p, t, lp, lt = prepared
        if reader.whole == "targets":
            mask = read_mask(mode, fraction, t, g)
            args = (t, lt, torch.where(mask, lp, math.nan), mask)
        else:
            mask = read_mask(mode, fraction, -p, g)
            args = (p, lp, torch.where(mask, lt, math.nan), mask)
    else:
        x, y = prepared
        mask = read_mask("cells" if mode == "marked" else mode, fraction, x, g)
        if mode == "marked":  # the target logits first, then random cells
            mask[torch.arange(x.shape[0], device=x.device), y] = True
        args = (torch.where(mask, x, math.nan), y, mask)
    return {name: abs(estimate(*args) - truth) / tolerance for name, estimate in reader.estimators.items()}


def simulate(reader: Reader, distribution: str, shape: tuple[int, int], seeds: range, device: torch.device,
             fractions: tuple[float, ...] = FRACTIONS,
             modes: tuple[str, ...] = MODES) -> dict[tuple[str, float], dict[str, list[float]]]:
    """{(mode, fraction): {estimator: [error / tolerance per seed]}}."""
    task: Task = get_task(reader.task)
    out: dict[tuple[str, float], dict[str, list[float]]] = {}
    for seed in seeds:
        inputs = task.make_inputs(shape, distribution, seed, device)
        truth = float(task.ground_truth(inputs))
        tolerance = task.tolerance.atol + task.tolerance.rtol * abs(truth)
        prepared = prepare(reader, inputs)
        del inputs
        g = torch.Generator(device=device).manual_seed(10_000 + seed)
        for mode in modes:
            for fraction in fractions:
                cell = out.setdefault((mode, fraction), {})
                for name, ratio in errors(reader, prepared, tolerance, truth, mode, fraction, g).items():
                    cell.setdefault(name, []).append(ratio)
        del prepared
    return out


Row = tuple[str, float, str, float, float, int, int]


def summary(results: dict[tuple[str, float], dict[str, list[float]]]) -> list[Row]:
    """Per (mode, fraction): the estimator with the lowest median ratio; (mode, f, name, median, min, inside, seeds)."""
    rows = []
    for (mode, fraction), by_name in results.items():
        name = min(by_name, key=lambda n: statistics.median(by_name[n]))
        values = by_name[name]
        rows.append((mode, fraction, name, statistics.median(values), min(values), sum(v <= 1 for v in values),
                     len(values)))
    return rows


def _shape(text: str) -> tuple[int, int]:
    rows, cols = text.lower().split("x")
    return int(rows), int(cols)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--seeds", type=int, default=64, help="seeds for the timed distribution (planted)")
    parser.add_argument("--control-seeds", type=int, default=16, help="seeds for the official distribution")
    parser.add_argument("--kl-shape", type=_shape, help="default: the official shape")
    parser.add_argument("--ce-shape", type=_shape, help="default: the official shape")
    parser.add_argument("--distributions", nargs="*", default=None,
                        help="default: official (the control) and every distribution the judge times with")
    parser.add_argument("--readers", nargs="*", default=[f"{t}:{w}" for t, w in READERS],
                        help="task:input read whole (default: all)")
    args = parser.parse_args()
    device = torch.device(args.device)
    print(f"# Partial reads against the judge's inputs\n\ndevice {device} "
          f"({torch.cuda.get_device_name(device) if device.type == 'cuda' else 'cpu'}), torch {torch.__version__}; "
          f"cells: |estimate - truth| / (atol + rtol |truth|), over seeds (under 1 passes)\n")
    detail = []
    for reader in (READERS[tuple(r.split(":"))] for r in args.readers):
        task = get_task(reader.task)
        shape = (args.kl_shape if reader.task == "kl_div" else args.ce_shape) or task.official_shape
        names = args.distributions or [OFFICIAL, *task.timed_distributions()]
        print(f"## {reader.task} at {shape[0]}x{shape[1]}, all {reader.whole} read\n")
        print("| distribution | read | f | best estimator | median | min | seeds inside |")
        print("|---|---|---|---|---|---|---|")
        for distribution in names:
            seeds = range(args.control_seeds if distribution == OFFICIAL else args.seeds)
            started = time.monotonic()
            results = simulate(reader, distribution, shape, seeds, device)
            for mode, fraction, name, median, low, inside, n in summary(results):
                print(f"| {distribution} | {mode} | {fraction:g} | {name} | {median:.3g} | {low:.3g} "
                      f"| {inside} of {n} |")
            detail.append((reader, distribution, results))
            print(f"<!-- {distribution}: {time.monotonic() - started:.0f} s -->", file=sys.stderr)
        print()
    print("## Every estimator's median\n")
    for reader, distribution, results in detail:
        names = sorted({n for by_name in results.values() for n in by_name})
        print(f"{reader.task}, all {reader.whole} read, {distribution}:\n")
        print("| read | f | " + " | ".join(names) + " |")
        print("|---|---|" + "---|" * len(names))
        for (mode, fraction), by_name in results.items():
            cells = [f"{statistics.median(by_name[n]):.3g}" if n in by_name else "" for n in names]
            print(f"| {mode} | {fraction:g} | " + " | ".join(cells) + " |")
        print()
    return 0


if __name__ == "__main__":
    sys.exit(main())
