"""The numbers papers report for a set of samples, as pure functions over plain rows (no database here).

Definitions, per group of samples (a batch overall, or one (task, model) pair):

- `compile_rate`, `correct_rate`: fractions of the judged samples that compiled / were correct.
- `fast_p`: KernelBench's metric (ScalingIntelligence/KernelBench, src/score.py, `fastp`; the paper
  arXiv:2502.10517 section 3): the fraction of ALL judged samples that are correct AND whose speedup
  (baseline time / candidate time) is greater than p. The denominator counts failures too. fast_0 is the
  correct rate (a measured speedup is always > 0; a correct sample without timings counts for p = 0 only).
  Reported against eager PyTorch and against torch.compile, for p in 0, 1, 1.5, 2.
- `geomean_speedup`: geometric mean of the speedups of the correct samples (KernelBench's
  `geometric_mean_speed_ratio_correct_only`); null when no correct sample was timed.
- `pass_at_k`: the unbiased estimator of Chen et al. 2021 (HumanEval, arXiv:2107.03374):
  pass@k = 1 - C(n - c, k) / C(n, k) per problem (here a (task, model) pair with n samples, c correct),
  averaged over problems. k runs over 1, 2, 4, ... up to n (and n itself); overall, up to the smallest n of
  the groups, so that every problem has at least k samples.
- `best_of_k_speedup`: the expected best speedup among k samples drawn without replacement from the n, with
  incorrect samples counting as 0. Unbiased over order statistics: with the n values sorted ascending
  v(1) <= ... <= v(n), E[max of k] = sum_{i=k..n} C(i-1, k-1) / C(n, k) * v(i) (the i-th smallest is the max
  of a k-subset in C(i-1, k-1) of the C(n, k) subsets). k = 1 is the mean, k = n the maximum. Null for a
  baseline when the group has correct samples but none timed against it.

Samples without a verdict (pending or cancelled) are not judged and are only counted in `unjudged`; a final
`system_error` (the judge's failure, not the candidate's) is left out of the rates and counted there too.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from math import comb
from typing import Any

from sandbox.verdict import Status

FAST_P = (0.0, 1.0, 1.5, 2.0)
BASELINES = ("eager", "compile")


@dataclass(frozen=True)
class Outcome:
    """One sample as the metrics see it; `status` None while unjudged (a duplicate carries its original's)."""

    task: str
    model: str | None
    status: Status | None
    compiled: bool = False
    speedup_eager: float | None = None
    speedup_compile: float | None = None

    @property
    def judged(self) -> bool:
        return self.status is not None and self.status is not Status.SYSTEM_ERROR

    @property
    def correct(self) -> bool:
        return self.status is Status.CORRECT

    def speedup(self, baseline: str) -> float | None:
        value = self.speedup_eager if baseline == "eager" else self.speedup_compile
        return value if value is not None and math.isfinite(value) and value > 0 else None


def _key(p: float) -> str:
    return f"{p:g}"


def fast_p(outcomes: Sequence[Outcome], p: float, baseline: str) -> float | None:
    """KernelBench fast_p: fraction of all judged samples that are correct and more than p times faster."""
    if not outcomes:
        return None
    if p == 0:
        hits = sum(o.correct for o in outcomes)
    else:
        hits = sum(o.correct and (s := o.speedup(baseline)) is not None and s > p for o in outcomes)
    return hits / len(outcomes)


def geomean_speedup(outcomes: Sequence[Outcome], baseline: str) -> float | None:
    speedups = [s for o in outcomes if o.correct and (s := o.speedup(baseline)) is not None]
    if not speedups:
        return None
    return math.exp(sum(math.log(s) for s in speedups) / len(speedups))


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k for one problem with n samples of which c are correct (requires k <= n)."""
    if k > n:
        raise ValueError(f"pass@{k} needs at least {k} samples, got {n}")
    if n - c < k:
        return 1.0
    return 1.0 - comb(n - c, k) / comb(n, k)


def best_of_k(values: Sequence[float], k: int) -> float:
    """Unbiased expected maximum of k values drawn without replacement from `values` (requires k <= n)."""
    n = len(values)
    if k > n:
        raise ValueError(f"best-of-{k} needs at least {k} samples, got {n}")
    ordered = sorted(values)
    total = comb(n, k)
    return sum(comb(i - 1, k - 1) * ordered[i - 1] for i in range(k, n + 1)) / total


def ks_up_to(n: int) -> list[int]:
    """1, 2, 4, ... below n, and n itself."""
    ks, k = [], 1
    while k < n:
        ks.append(k)
        k *= 2
    if n >= 1:
        ks.append(n)
    return ks


def _groups(outcomes: Iterable[Outcome]) -> dict[tuple[str, str | None], list[Outcome]]:
    groups: dict[tuple[str, str | None], list[Outcome]] = {}
    for o in outcomes:
        groups.setdefault((o.task, o.model), []).append(o)
    return groups


def _best_of_k_group(judged: Sequence[Outcome], k: int, baseline: str) -> float | None:
    if any(o.correct for o in judged) and not any(o.correct and o.speedup(baseline) for o in judged):
        return None  # correct but never timed against this baseline (compile-only judge): unknown, not 0
    values = [(o.speedup(baseline) or 0.0) if o.correct else 0.0 for o in judged]
    return best_of_k(values, k)


def _mean(values: list[float | None]) -> float | None:
    known = [v for v in values if v is not None]
    return sum(known) / len(known) if known else None


def summarize(outcomes: Iterable[Outcome]) -> dict[str, Any]:
    """The metrics of one set of samples; pass@k and best-of-k are averaged over its (task, model) problems."""
    everything = list(outcomes)
    judged = [o for o in everything if o.judged]
    n = len(judged)
    problems = [g for g in _groups(judged).values()]
    ks = ks_up_to(min(len(g) for g in problems)) if problems else []
    return {
        "samples": n,
        "unjudged": len(everything) - n,
        "compile_rate": sum(o.compiled for o in judged) / n if n else None,
        "correct_rate": sum(o.correct for o in judged) / n if n else None,
        "fast_p": {b: {_key(p): fast_p(judged, p, b) for p in FAST_P} for b in BASELINES},
        "geomean_speedup": {b: geomean_speedup(judged, b) for b in BASELINES},
        "pass_at_k": {str(k): sum(pass_at_k(len(g), sum(o.correct for o in g), k) for g in problems) / len(problems)
                      for k in ks},
        "best_of_k_speedup": {b: {str(k): _mean([_best_of_k_group(g, k, b) for g in problems]) for k in ks}
                              for b in BASELINES},
    }


def batch_metrics(outcomes: Iterable[Outcome]) -> dict[str, Any]:
    """{"overall": M, "by_task_model": [{"task", "model", **M}, ...]} (groups sorted by task, then model)."""
    everything = list(outcomes)
    groups = _groups(everything)
    by_group = [{"task": task, "model": model, **summarize(rows)}
                for (task, model), rows in sorted(groups.items(), key=lambda kv: (kv[0][0], kv[0][1] or ""))]
    return {"overall": summarize(everything), "by_task_model": by_group}
