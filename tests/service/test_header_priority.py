"""The worker's background build of the shared headers (service/worker/headers.py): the first variant at the worker's
own priority, every later one at the lowest, on its own thread alone (the compilers that thread starts inherit it)."""

from __future__ import annotations

import os
import threading
from pathlib import Path

import sandbox
from service.worker import headers


def test_variants_after_the_first_are_built_at_the_lowest_priority(monkeypatch, tmp_path: Path) -> None:
    calls: list[tuple[list[tuple[str, ...]], int]] = []

    def warm_headers(cache_root, target, flag_sets, on_progress) -> list[Path]:
        calls.append((list(flag_sets), os.getpriority(os.PRIO_PROCESS, threading.get_native_id())))
        return []

    monkeypatch.setattr(sandbox, "warm_headers", warm_headers)
    own = os.getpriority(os.PRIO_PROCESS, threading.get_native_id())
    build = headers.HeaderBuild([("-O2",), (), ("-O3",)])
    thread = build.start(tmp_path, "cpu")
    assert thread is not None
    thread.join(30)
    assert calls == [([("-O2",)], own), ([(), ("-O3",)], headers.LATER_VARIANTS_NICE)]
    assert os.getpriority(os.PRIO_PROCESS, threading.get_native_id()) == own, "the worker's other threads keep theirs"
