"""service.batches.metrics against numbers derived by hand (in the comments) and against brute force."""

from __future__ import annotations

import itertools
import math
import random

import pytest

from sandbox.verdict import Status
from service.batches.metrics import (
    Outcome,
    batch_metrics,
    best_of_k,
    ks_up_to,
    pass_at_k,
    summarize,
)

S = Status
ROWS = [
    # kl_div / a: n = 4 judged (c = 2) + 1 pending
    Outcome("kl_div", "a", S.CORRECT, True, 2.0, 0.5),
    Outcome("kl_div", "a", S.CORRECT, True, 1.2, 0.3),
    Outcome("kl_div", "a", S.INCORRECT, True),
    Outcome("kl_div", "a", S.COMPILE_ERROR, False),
    Outcome("kl_div", "a", None),
    # kl_div / b: n = 2 judged (c = 1) + 1 system_error (the judge's failure: not counted)
    Outcome("kl_div", "b", S.CORRECT, True, 3.0, 1.6),
    Outcome("kl_div", "b", S.POLICY_VIOLATION, False),
    Outcome("kl_div", "b", S.SYSTEM_ERROR, False),
    # cross_entropy / a: n = 2 judged (c = 1)
    Outcome("cross_entropy", "a", S.CORRECT, True, 0.8, 0.4),
    Outcome("cross_entropy", "a", S.TIMEOUT, True),
]


def test_overall_metrics_match_hand_computed_values():
    m = summarize(ROWS)
    # 8 judged samples (10 minus the pending one and the system_error)
    assert m["samples"] == 8 and m["unjudged"] == 2
    # compiled: 2 correct + incorrect (kl_div/a), correct (b), correct + timeout (ce) = 6 of 8
    assert m["compile_rate"] == pytest.approx(6 / 8)
    assert m["correct_rate"] == pytest.approx(4 / 8)
    # fast_p over ALL 8 judged samples, correct and speedup > p.
    # eager speedups of the correct ones: 2.0, 1.2, 3.0, 0.8
    #   p=0: 4/8; p=1: 2.0, 1.2, 3.0 -> 3/8; p=1.5: 2.0, 3.0 -> 2/8; p=2 (strictly greater): 3.0 -> 1/8
    assert m["fast_p"]["eager"] == pytest.approx({"0": 0.5, "1": 0.375, "1.5": 0.25, "2": 0.125})
    # compile speedups: 0.5, 0.3, 1.6, 0.4 -> p=1: 1.6 -> 1/8; p=1.5: 1/8; p=2: 0
    assert m["fast_p"]["compile"] == pytest.approx({"0": 0.5, "1": 0.125, "1.5": 0.125, "2": 0.0})
    # geomean eager: (2.0 * 1.2 * 3.0 * 0.8) ** (1/4) = 5.76 ** 0.25 = sqrt(2.4) = 1.549193...
    assert m["geomean_speedup"]["eager"] == pytest.approx(math.sqrt(2.4))
    # compile: (0.5 * 0.3 * 1.6 * 0.4) ** (1/4) = 0.096 ** 0.25
    assert m["geomean_speedup"]["compile"] == pytest.approx(0.096 ** 0.25)
    # Problems (task, model): n = 4, 2, 2; the smallest n is 2, so k in (1, 2).
    # pass@1 = c/n each: 2/4, 1/2, 1/2 -> mean 0.5
    # pass@2: kl_div/a 1 - C(2,2)/C(4,2) = 1 - 1/6 = 5/6; the others 1 - C(1,2)/C(2,2) = 1 -> (5/6 + 2) / 3 = 17/18
    assert m["pass_at_k"] == pytest.approx({"1": 0.5, "2": 17 / 18})
    # best-of-k eager (incorrect = 0): kl_div/a [0, 0, 1.2, 2.0]: k=1 mean 0.8; k=2 (2*1.2 + 3*2.0)/C(4,2) = 8.4/6 = 1.4
    #   kl_div/b [0, 3.0]: 1.5, 3.0; cross_entropy/a [0, 0.8]: 0.4, 0.8
    #   -> k=1 (0.8 + 1.5 + 0.4)/3 = 0.9; k=2 (1.4 + 3.0 + 0.8)/3 = 5.2/3
    assert m["best_of_k_speedup"]["eager"] == pytest.approx({"1": 0.9, "2": 5.2 / 3})
    # compile: kl_div/a [0, 0, 0.3, 0.5]: 0.2, (2*0.3 + 3*0.5)/6 = 0.35; b [0, 1.6]: 0.8, 1.6; ce [0, 0.4]: 0.2, 0.4
    assert m["best_of_k_speedup"]["compile"] == pytest.approx({"1": 1.2 / 3, "2": 2.35 / 3})


def test_per_task_model_groups():
    groups = {(g["task"], g["model"]): g for g in batch_metrics(ROWS)["by_task_model"]}
    assert list(groups) == [("cross_entropy", "a"), ("kl_div", "a"), ("kl_div", "b")]
    a = groups[("kl_div", "a")]
    assert (a["samples"], a["unjudged"], a["correct_rate"], a["compile_rate"]) == (4, 1, 0.5, 0.75)
    # k up to n = 4: 1, 2, 4. pass@4 with 2 failures among 4: every 4-subset holds a correct one -> 1.
    assert a["pass_at_k"] == pytest.approx({"1": 0.5, "2": 5 / 6, "4": 1.0})
    # best-of-4 is the maximum, 2.0; best-of-1 the mean, 3.2 / 4
    assert a["best_of_k_speedup"]["eager"] == pytest.approx({"1": 0.8, "2": 1.4, "4": 2.0})
    b = groups[("kl_div", "b")]
    assert (b["samples"], b["unjudged"], b["compile_rate"]) == (1 + 1, 1, 0.5)
    assert b["fast_p"]["compile"] == pytest.approx({"0": 0.5, "1": 0.5, "1.5": 0.5, "2": 0.0})


def test_unbiased_estimators_equal_brute_force_enumeration():
    rng = random.Random(7)
    for n in range(1, 8):
        values = [rng.choice([0.0, rng.uniform(0.2, 4.0)]) for _ in range(n)]
        c = sum(v > 0 for v in values)
        for k in range(1, n + 1):
            subsets = list(itertools.combinations(values, k))
            assert pass_at_k(n, c, k) == pytest.approx(sum(any(v > 0 for v in s) for s in subsets) / len(subsets))
            assert best_of_k(values, k) == pytest.approx(sum(max(s) for s in subsets) / len(subsets))
    with pytest.raises(ValueError, match="at least 3"):
        pass_at_k(2, 1, 3)


def test_correct_samples_without_timings_and_empty_sets():
    # The compile-only judge: correct, never timed. fast_0 counts them; no speedup can be claimed.
    m = summarize([Outcome("kl_div", "m", S.CORRECT, True), Outcome("kl_div", "m", S.INCORRECT, True)])
    assert m["fast_p"]["eager"] == {"0": 0.5, "1": 0.0, "1.5": 0.0, "2": 0.0}
    assert m["geomean_speedup"] == {"eager": None, "compile": None}
    assert m["best_of_k_speedup"]["eager"] == {"1": None, "2": None}
    empty = summarize([Outcome("kl_div", "m", None)])
    assert (empty["samples"], empty["unjudged"], empty["correct_rate"], empty["pass_at_k"]) == (0, 1, None, {})
    assert ks_up_to(1) == [1] and ks_up_to(5) == [1, 2, 4, 5] and ks_up_to(8) == [1, 2, 4, 8]
