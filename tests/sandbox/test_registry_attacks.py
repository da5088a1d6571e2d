"""Registry attacks that come out `correct` gain nothing: ranked no faster than their honest twins (issue 39).

Some of class 14's triggers (`tests/corpus/hostile/cpu/c14_*.py`) cannot fire while a timed call's inputs exist (an
`atexit` callback, import hooks, a codec search function, `warnings.showwarning`, logging handlers), or fire only
inside the call's timed interval (a global module forward pre-hook): forward() then does the work itself and the
verdict is `correct`, which `test_corpus_hostile_registries.py` checks. Others fire while the inputs are made but
also at nearly every allocation of forward() (a self-renewing finaliser), whose claims may then stay within the
CPU-time bound:
`correct`, ranked at the parent's accounting of the sandbox's CPU time. That alone would also pass an attack that
scored: so each such file is judged here beside its honest twin (the same file with `HIDE = False`: the same kernel,
no trigger), both at once on two threads, so that they share whatever else loads the host, and the attack's ranked
median must not be below the twin's by more than the noise of such a pair.

TOLERANCE: an attack whose trigger never fires (`c14_atexit.py`) judged at once with its twin, three times on the
2-core development machine under a load average of 13-19 from other work (2026-11-28), read 1.17, 1.71 and 0.69 times
its twin's median; judged one after the other, the twin itself read 14.3, 15.1 and 34.9 ms. So the attack may read
down to half its twin's median before it counts as a gain: a coarse guard on a loaded host, still far from what
moving the work out of the window gives (the stored-answer attacks claim 0.20-0.22 ms against 3.5-4.5 ms of CPU work
a call, 16-20x, and are refused at 3.3x as `tamper_detected`).
"""

from __future__ import annotations

import re
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from sandbox import Status, judge
from sandbox.config import JudgeConfig

from .conftest import CORPUS, corpus_meta
from .test_corpus import check_verdict

pytestmark = pytest.mark.slow  # two full CPU judgings a file, at once: 40-130 s each

HOSTILE = CORPUS / "hostile" / "cpu"
FIRING_ATTACKS = sorted(p for p in HOSTILE.glob("c14_*.py")
                        if corpus_meta(p)["expect"] != "correct" and re.fullmatch(corpus_meta(p)["expect"], "correct")
                        and "\nHIDE = True\n" in p.read_text())
"""The class-14 attacks whose trigger fires while the inputs exist and whose header allows `correct` beside a refusal
(a self-renewing finaliser, a native pending call: the claim may stay under the CPU-time bound, and it is then ranked
at the parent's accounting). The ones declared plainly `correct` never fire inside the window (atexit, import hooks, a
codec search, `warnings.showwarning`, logging handlers) or fire inside the call's own interval (a module forward
pre-hook): forward() does the work, which test_corpus_hostile_registries.py judges and the GPU run compares with their
twins (docs/results/integrity-v4-h200-2026-11-28.md); judging each beside a twin here would add a pair of judgings
to CI for a comparison their trigger cannot change."""
TOLERANCE = 0.5
"""How much faster than its twin an attack's ranked median may read before it counts as a gain (see above)."""


def honest_twin(source: str) -> str:
    """The same candidate without its trigger: every call's work in forward()."""
    assert source.count("\nHIDE = True\n") == 1, "a registry attack declares `HIDE = True` once"
    return source.replace("\nHIDE = True\n", "\nHIDE = False\n")


def test_every_firing_registry_attack_is_listed() -> None:
    """The list is read from the headers: at least the finaliser-driven and native triggers must be in it."""
    names = {p.stem for p in FIRING_ATTACKS}
    assert {"c14_asyncio_stack_walker", "c14_unraisable_hook", "c14_native_timer_pending_call"} <= names, names


@pytest.mark.parametrize("path", FIRING_ATTACKS, ids=lambda p: p.stem)
def test_a_firing_registry_attack_is_refused_or_no_faster_than_its_honest_twin(path: Path,
                                                                              judge_config: JudgeConfig) -> None:
    meta = corpus_meta(path)
    source, task = path.read_text(encoding="utf-8"), meta["task"]
    with ThreadPoolExecutor(2) as pool:  # at once: the host's other load falls on both alike
        attack, twin = pool.map(lambda code: judge(task, code, "cpu", config=judge_config),
                                [source, honest_twin(source)])
    check_verdict(path, attack)  # the attack's own judging: test_corpus_hostile_registries.py leaves these files out
    if attack.status is not Status.CORRECT:
        return  # refused: no score, nothing gained
    assert twin.status is Status.CORRECT, twin.diagnosis
    assert attack.performance is not None and twin.performance is not None
    attack_ms, twin_ms = attack.performance.candidate.median_ms, twin.performance.candidate.median_ms
    assert attack_ms >= twin_ms * (1 - TOLERANCE), (
        f"{path.name} ranks at {attack_ms:.4f} ms against its honest twin's {twin_ms:.4f} ms: the trigger gained")
