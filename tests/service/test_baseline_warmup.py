"""The worker compiles the references ahead of their baselines (service/worker/warmup.py): on its own thread, the first
task at the worker's priority and the rest at the lowest (the compilers it starts inherit it), for CPU devices only,
from `Settings.warm_baselines`; a failure is logged and the next task still compiles. And in a real worker process,
the compile itself, against a cold measurement: it changes nothing measured."""

from __future__ import annotations

import logging
import os
import sys
import threading
from pathlib import Path

import pytest
from pydantic import ValidationError

import sandbox
from reference import get_task
from service.core.config import Settings
from sandbox.execution.baseline import INDUCTOR_CACHE, get_baselines
from service.worker import warmup
from tests.service.conftest import Proc, wait_for


def _recording(monkeypatch, fail: set[str] = frozenset()) -> list[tuple]:
    calls: list[tuple] = []

    def prewarm_compile(task_id, device, shape, config):
        calls.append((str(task_id), device, tuple(shape), os.getpriority(os.PRIO_PROCESS, threading.get_native_id())))
        if str(task_id) in fail:
            raise RuntimeError("inductor failed")
        return {"misses": 1, "hits": 0}

    monkeypatch.setattr(sandbox, "prewarm_compile", prewarm_compile)
    return calls


def test_the_references_compile_in_order_the_first_at_the_workers_priority(monkeypatch, tmp_path: Path,
                                                                            caplog) -> None:
    calls = _recording(monkeypatch)
    own = os.getpriority(os.PRIO_PROCESS, threading.get_native_id())
    caplog.set_level(logging.INFO, logger=warmup.__name__)
    thread = warmup.start(sandbox.JudgeConfig(cache_root=tmp_path), ["cpu:0", "cpu:1"], ["kl_div", "cross_entropy"])
    assert thread is not None
    thread.join(30)
    assert own != warmup.NICE
    assert calls == [("kl_div", "cpu", get_task("kl_div").cpu_shape, own),
                     ("cross_entropy", "cpu", get_task("cross_entropy").cpu_shape, warmup.NICE)]
    assert os.getpriority(os.PRIO_PROCESS, threading.get_native_id()) == own, "the worker's other threads keep theirs"
    assert "compiled the cross_entropy reference ahead of its baselines" in caplog.text


def test_a_failed_compile_is_logged_and_the_next_task_still_compiles(monkeypatch, tmp_path: Path, caplog) -> None:
    calls = _recording(monkeypatch, fail={"kl_div"})
    thread = warmup.start(sandbox.JudgeConfig(cache_root=tmp_path), ["cpu"], ["kl_div", "cross_entropy"])
    assert thread is not None
    thread.join(30)
    assert [c[0] for c in calls] == ["kl_div", "cross_entropy"]
    assert "compiling the kl_div reference ahead of its baselines failed" in caplog.text


def test_nothing_is_compiled_ahead_for_a_gpu_or_when_off(monkeypatch, tmp_path: Path) -> None:
    calls = _recording(monkeypatch)
    config = sandbox.JudgeConfig(cache_root=tmp_path)
    assert warmup.start(config, ["cuda:0", "cuda:1"], ["kl_div"]) is None
    assert warmup.start(config, ["cpu"], Settings(warm_baselines="off").warm_baseline_tasks()) is None
    assert calls == []


def test_the_setting_names_tasks_and_refuses_others_saying_which_exist() -> None:
    assert Settings(warm_baselines=" kl_div , kl_div_train").warm_baseline_tasks() == ["kl_div", "kl_div_train"]
    with pytest.raises(ValidationError, match="valid task ids: kl_div, cross_entropy"):
        Settings(warm_baselines="kl_div,softmax")


def _graphs(cache_root: Path) -> set[str]:
    """The keys of the compiled graphs in a cache root's inductor cache: each hashes the graph, its inputs' shapes,
    torch's version and inductor's configuration, so two equal keys are the same code."""
    return {entry.name for entry in (cache_root / INDUCTOR_CACHE / "fxgraph").glob("*/*")}


def _niceness_of_compile(worker_pid: int) -> list[int]:
    """The niceness of the worker's reference compile (`measure_baselines --compile-only`) while it runs, in a list
    (empty before it starts: 0, the worker's own niceness, would read as not yet)."""
    for entry in os.listdir("/proc"):
        try:
            cmdline = Path(f"/proc/{entry}/cmdline").read_bytes()
            stat = Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()
        except (OSError, ValueError):
            continue
        if b"--compile-only" in cmdline and int(stat[1]) == worker_pid:
            return [int(stat[16])]
    return []


def test_a_worker_compiles_ahead_and_the_baselines_then_run_the_graphs_a_cold_host_compiles(tmp_path: Path,
                                                                                            monkeypatch) -> None:
    """A real worker on fresh caches compiles the kl_div reference in the background (its first task: at the worker's
    own priority, beside the first shared header, which the first candidate waits for anyway); the baselines measured
    afterwards take every graph from that cache, and they are the graphs a measurement without the warm-up compiles
    itself (a differential: the speed-up changes nothing measured)."""
    monkeypatch.delenv("TORCHINDUCTOR_CACHE_DIR")  # the run's shared one (tests/conftest.py): each cache root its own
    task = get_task("kl_div")
    warm, cold = sandbox.JudgeConfig(cache_root=tmp_path / "warm"), sandbox.JudgeConfig(cache_root=tmp_path / "cold")
    env = {**os.environ, "DATABASE_URL": f"sqlite:///{tmp_path / 'judge.db'}", "JUDGE_DEVICES": "cpu",
           "JUDGE_CACHE_ROOT": str(warm.cache_root), "JUDGE_BUILD_ROOT": str(tmp_path / "builds"),
           "JUDGE_WARM_BASELINES": "kl_div", "JUDGE_LOG_LEVEL": "INFO"}
    worker = Proc([sys.executable, "-m", "service.cli.main", "worker"], env, tmp_path / "worker.log")
    try:
        (niceness,) = wait_for(lambda: _niceness_of_compile(worker.pid), 120, "the worker's reference compile")
        assert niceness == os.getpriority(os.PRIO_PROCESS, 0) != warmup.NICE  # the worker's, which it inherits
        done = wait_for(lambda: "compiled the kl_div reference ahead" in worker.log.read_text(), 300,
                        "the compile's log line")
        assert done
    finally:
        worker.close()
    assert not (warm.cache_root / "baselines.json").exists(), "the warm-up times nothing and caches no baseline"

    after = get_baselines(task.id, "cpu", task.cpu_shape, warm)
    before = get_baselines(task.id, "cpu", task.cpu_shape, cold)
    graphs = before["compile_cache"]["misses"]
    assert graphs >= 1 and before["compile_cache"]["hits"] == 0, before["compile_cache"]
    assert after["compile_cache"] == {"misses": 0, "hits": graphs}, after["compile_cache"]
    assert _graphs(warm.cache_root) == _graphs(cold.cache_root) != set()
    assert set(after["baselines"]) == set(before["baselines"]) == {"eager", "compile"}
    # Cached now: nothing left to compile ahead (a restarted worker, or one beside it on the same cache root).
    assert sandbox.prewarm_compile(task.id, "cpu", task.cpu_shape, warm) is None
