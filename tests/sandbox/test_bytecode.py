"""The bytecode-cache check: children run `python -B` under a read-only root, so a package installed without
`.pyc` files is compiled from source on every spare's start (sandbox/execution/bytecode.py)."""

from __future__ import annotations

import compileall
import logging
from pathlib import Path

import pytest

from sandbox.execution import bytecode
from sandbox.execution import warm


@pytest.fixture
def package(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    root = tmp_path / "site" / "judgeprobe"
    (root / "sub").mkdir(parents=True)
    for name in ("__init__.py", "a.py", "sub/__init__.py", "sub/b.py"):
        (root / name).write_text("X = 1\n")
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    return root


def test_a_package_without_caches_is_reported_with_the_command_that_fixes_it(package: Path) -> None:
    found = bytecode.coverage("judgeprobe")
    assert found is not None and (found.modules, found.cached, found.share) == (4, 0, 0.0)
    missing = bytecode.missing_caches(("judgeprobe", "no_such_package_here"))
    assert [c.package for c in missing] == ["judgeprobe"], "a package that is not installed is not reported"
    advice = bytecode.advice(missing)
    assert "judgeprobe (0/4 cached)" in advice
    assert f"python -m compileall -q -j 0 {package.parent}" in advice


def test_a_compiled_package_is_not_reported(package: Path) -> None:
    assert compileall.compile_dir(str(package), quiet=1)
    found = bytecode.coverage("judgeprobe")
    assert found is not None and found.share == 1.0
    assert bytecode.missing_caches(("judgeprobe",)) == []


def test_the_pool_warns_once_per_process(monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture,
                                         package: Path) -> None:
    original = bytecode.missing_caches
    monkeypatch.setattr(warm.bytecode, "missing_caches", lambda: original(("judgeprobe",)))
    warm._warn_if_uncached.cache_clear()
    with caplog.at_level(logging.WARNING, logger="sandbox.execution.warm"):
        warm._warn_if_uncached()
        warm._warn_if_uncached()
    warm._warn_if_uncached.cache_clear()
    warnings = [r.getMessage() for r in caplog.records if "bytecode caches" in r.getMessage()]
    assert len(warnings) == 1 and "judgeprobe (0/4 cached)" in warnings[0]
