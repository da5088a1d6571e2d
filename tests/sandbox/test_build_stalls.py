"""A compile limit charges the candidate only for time it had (sandbox/build/stall.py, issue 40.2): a build child
the host stopped is the judge's retry, never the candidate's `timeout` nor a stored outcome; a candidate that
burns the limit's CPU, or sleeps through it, gets its `timeout`. Real build children, a real SIGSTOP."""

from __future__ import annotations

import os
import signal
import threading
from dataclasses import replace
from pathlib import Path

from sandbox import Status
from sandbox.build import compiler as build
from sandbox.build.stall import _tree
from sandbox.pipeline import execute, prepare
from sandbox.candidate import PreparedCandidate
from sandbox.verdict import Verdict

from .conftest import CORPUS

HONEST = (CORPUS / "cpu" / "kl_div_cpp_correct.py").read_text()
TORCH_ONLY = (CORPUS / "cpu" / "kl_div_torch_only.py").read_text()
SHORT_LIMIT_S = 6.0
OWN_LIMIT_S = 12.0


def _build_child_tree() -> dict[int, tuple[str, int, float]]:
    """This test's build child ("python -m sandbox.child compile ...") and its descendants, found in /proc."""
    mine = _tree(os.getpid())
    for pid in mine:
        try:
            argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if argv[1:5] == [b"-B", b"-m", b"sandbox.child", b"compile"]:  # the child itself, not its launcher
            return _tree(pid)
    return {}


def _stop_build_children(done: threading.Event, stopped: list[int]) -> None:
    """What a frozen host does to the build: every process of the build child's tree is stopped as it appears,
    until the judging returns (the sandbox then kills the stopped tree)."""
    while not done.wait(0.05):
        for pid, (state, _, _) in _build_child_tree().items():
            if state not in ("T", "t", "Z"):
                try:
                    os.kill(pid, signal.SIGSTOP)
                    stopped.append(pid)
                except ProcessLookupError:
                    pass


def test_a_stopped_build_child_is_the_hosts_stall_then_the_candidates_true_verdict(judge_config,
                                                                                     tmp_path: Path) -> None:
    config = replace(judge_config, build_root=tmp_path / "builds", compile_timeout_s=SHORT_LIMIT_S)
    done, stopped = threading.Event(), []
    stopper = threading.Thread(target=_stop_build_children, args=(done, stopped))
    stopper.start()
    try:
        first = prepare("kl_div", HONEST, target="cpu", config=config)
    finally:
        done.set()
        stopper.join()
    assert stopped, "the build child was never seen"
    assert isinstance(first, Verdict) and first.status is Status.SYSTEM_ERROR, first
    assert first.status is not Status.TIMEOUT and "the host stalled the build" in first.diagnosis
    stall = first.details["stall"]
    assert stall["stopped_s"] >= 0.5 * stall["wall_s"] and stall["wall_s"] >= SHORT_LIMIT_S - 1, stall
    assert not list((tmp_path / "builds").glob(f"*/{build.RESULT_FILE}"))  # the host's stall is never stored
    # Judged again once the host runs it (the worker's retry of a system_error): the candidate's own verdict.
    again = prepare("kl_div", HONEST, target="cpu", config=replace(config, compile_timeout_s=300.0))
    assert isinstance(again, PreparedCandidate), again
    assert not again.compile_cached
    verdict = execute(again, "cpu", config=config)
    assert verdict.status is Status.CORRECT, verdict


def test_a_candidate_that_burns_or_sleeps_through_the_limit_gets_its_timeout(judge_config, tmp_path: Path) -> None:
    """Its time was its own: busy on the CPU (the limit's time spent computing at import), or asleep by choice.
    Measured on this shared 2-core machine at load 8-9, where the busy child gets about a quarter of a CPU: slowed
    by the host, not starved by it (sandbox/build/stall.py STARVED_CPU_SHARE), so charged."""
    config = replace(judge_config, build_root=tmp_path / "builds", compile_timeout_s=OWN_LIMIT_S)
    burns = "x = 0\nwhile True:\n    x += 1\n"
    for name, stall in (("burns", burns), ("sleeps", "import time\ntime.sleep(600)\n")):
        source = TORCH_ONLY.replace("import torch\n", f"import torch\n{stall}", 1)
        verdict = prepare("kl_div", source, target="cpu", config=config)
        assert isinstance(verdict, Verdict) and verdict.status is Status.TIMEOUT, (name, verdict)
        assert "did not finish within 12 s" in verdict.diagnosis
