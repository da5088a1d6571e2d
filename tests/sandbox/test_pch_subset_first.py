"""Subset first, full on demand (sandbox/build/accel.py): a PCH variant is published with its subset PCH alone, its full
PCH compiled only once something wants it and moved in by a thread of the asking process; every state in between
compiles what torch alone compiles.

The parent's side runs real g++ on a small stand-in for torch's include tree (every header the subset names, one
line each), with a compiler wrapper that holds the full PCH's compile at a gate the test opens (a FIFO named by
JUDGE_TEST_PCH_GATE): the in-between state is then certain, not a race. The child's side is judged for real: the
session's own -O2 variant, copied without its full PCH, offered to a real sandboxed build of a candidate that needs
the full header.
"""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from pathlib import Path

import pytest

from sandbox import Status, execute
from sandbox.build import accel as build_accel
from sandbox.build import pch_compilers
from sandbox.child.build import hooks as build_hooks
from sandbox.shared import accel_layout
from sandbox.config import JudgeConfig
from sandbox.pipeline import PreparedCandidate, prepare

from .conftest import CORPUS

GATE = "JUDGE_TEST_PCH_GATE"


def _fake_torch(root: Path) -> list[str]:
    """A torch include tree with every header the subset PCH names; the flags of a compile against it."""
    include = root / "include"
    for name in (*pch_compilers.SUBSET_HEADERS, "torch/extension.h"):
        (include / name).parent.mkdir(parents=True, exist_ok=True)
        (include / name).write_text(f"#pragma once\n// {name}\n")
    (include / "torch" / "extension.h").write_text("#pragma once\nstruct Judge { int x = 42; };\n")
    return ["-isystem", str(include), "-fPIC", "-std=c++17"]


def _gated_compiler(root: Path) -> str:
    """g++, but a PCH compile of the full torch/extension.h first reads $JUDGE_TEST_PCH_GATE (a FIFO blocks it until
    the test writes; /dev/null lets it through) and fails when it reads "fail". Every PCH compile is logged."""
    script = root / "gated-g++"
    script.write_text(
        "#!/bin/sh\n"
        f"case \"$*\" in *c++-header*) echo \"$*\" >> {root / 'runs.log'};; esac\n"
        "case \"$*\" in *c++-header*include/torch/extension.h*)\n"
        f"  word=$(cat \"${GATE}\"); echo \"full PCH at nice $(nice)\" >> {root / 'runs.log'}\n"
        "  [ \"$word\" = fail ] && { echo 'the full PCH refused' >&2; exit 1; };;\n"
        "esac\n"
        "exec g++ \"$@\"\n")
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    return str(script)


def _open_gate(gate: Path, word: str = "go") -> None:
    with open(gate, "w") as fifo:  # blocks until the held compile opens it to read
        fifo.write(word)


def _full_runs(root: Path) -> int:
    log = root / "runs.log"
    lines = log.read_text().splitlines() if log.exists() else []
    return sum("c++-header" in line and "include/torch/extension.h" in line for line in lines)


@pytest.fixture
def gated(tmp_path: Path, monkeypatch) -> tuple[str, list[str], Path, Path]:  # noqa: ANN001
    gate = tmp_path / "gate"
    os.mkfifo(gate)
    monkeypatch.setenv(GATE, str(gate))
    return _gated_compiler(tmp_path), _fake_torch(tmp_path), tmp_path / "accel", gate


def _wait_full_behind_the_gate(root: Path, compiler: str, flags: list[str], gate: Path,
                                word: str = "go") -> Path | None:
    """`build_variant(wait_full=True)` on a thread, its full PCH's compile let through the gate with `word` (writing
    to the FIFO blocks until that compile opens it: the compile is certainly running then); what it returned."""
    with ThreadPoolExecutor(1) as pool:
        waiting = pool.submit(build_accel.build_variant, root, compiler, flags, wait_full=True)
        _open_gate(gate, word)
        return waiting.result(timeout=600)


def test_a_variant_is_published_with_its_subset_alone_and_its_full_pch_built_when_wanted(gated) -> None:  # noqa: ANN001
    compiler, flags, root, gate = gated
    variant = build_accel.build_variant(root, compiler, flags)
    assert variant is not None
    # Published with the subset and its stub, the record, and no full PCH: none is compiled until one is wanted.
    assert accel_layout.usable(variant) and not accel_layout.has_full(variant)
    assert (variant / build_accel.SUBSET_DIR / "torch" / "extension.h").read_text() == accel_layout.SUBSET_STUB_TEXT
    record = json.loads((variant / build_accel.FLAGS_FILE).read_text())
    # The subset's seconds are rounded to a tenth, and this fake tree's subset can compile in under 0.05 s: 0.0 is
    # a valid record.
    assert record["flags"] == flags and record["seconds"] is None and isinstance(record["subset_seconds"], float)
    assert build_accel.build_variant(root, compiler, flags) == variant
    assert not list(root.glob(f".tmp-{variant.name}-full-*")) and _full_runs(root.parent) == 0
    assert _wait_full_behind_the_gate(root, compiler, flags, gate) == variant
    assert accel_layout.has_full(variant)
    assert (variant / "torch" / "extension.h").read_text() == build_accel.STUB_TEXT
    full_record = json.loads((variant / build_accel.FLAGS_FILE).read_text())
    assert isinstance(full_record["seconds"], float)  # rounded to a tenth, as the subset's above
    assert not list(root.glob(".tmp-*")) and _full_runs(root.parent) == 1
    # Builds may wait for the full PCH (a candidate that wants it): it is compiled at normal priority.
    assert "full PCH at nice 0" in (root.parent / "runs.log").read_text()
    # What was moved in is a whole PCH that g++ reads.
    use = root.parent / "use.cpp"
    use.write_text("#include <torch/extension.h>\nint main() { return Judge{}.x - 42; }\n")
    proc = subprocess.run(["g++", "-H", "-Winvalid-pch", *flags, str(use), "-o", str(root.parent / "use")],
                          capture_output=True, text=True, env={**os.environ, "CPATH": str(variant)})
    assert proc.returncode == 0 and f"! {variant}/torch/extension.h.gch" in proc.stderr, proc.stderr


def test_a_full_pch_that_fails_after_the_subset_is_recorded_and_the_variant_stays(gated) -> None:  # noqa: ANN001
    compiler, flags, root, gate = gated
    variant = build_accel.build_variant(root, compiler, flags)
    assert variant is not None and not accel_layout.has_full(variant)
    assert _wait_full_behind_the_gate(root, compiler, flags, gate, "fail") == variant  # returns: it failed
    assert "the full PCH refused" in (root / f"{variant.name}.full.failed").read_text()
    assert accel_layout.usable(variant) and not accel_layout.has_full(variant)
    assert build_accel.build_variant(root, compiler, flags, wait_full=True) == variant
    assert _full_runs(root.parent) == 1, "a failed full PCH was compiled again"
    assert not list(root.glob(".tmp-*"))


_PUBLISH_WANT_THEN_WAIT = """\
import sys
from pathlib import Path
from sandbox.build import accel as build_accel
root, compiler, flags = Path(sys.argv[1]), sys.argv[2], sys.argv[3:]
variant = build_accel.build_variant(root, compiler, flags)
(root / f"{variant.name}.full.wanted").touch()  # as `want_full` marks it
assert build_accel.build_variant(root, compiler, flags) == variant  # wanted: its full PCH starts in the background
print(variant, flush=True)
sys.stdin.read()
"""


def test_a_full_pch_whose_builder_died_is_compiled_again_by_the_next_caller(gated, monkeypatch) -> None:  # noqa: ANN001
    compiler, flags, root, gate = gated
    builder = subprocess.Popen([sys.executable, "-c", _PUBLISH_WANT_THEN_WAIT, str(root), compiler, *flags],
                               stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        variant = Path(builder.stdout.readline().strip())  # published, its full PCH started and held at the gate
    finally:
        builder.kill()
        builder.wait()
    assert accel_layout.usable(variant) and not accel_layout.has_full(variant)
    stale = list(root.glob(f".tmp-{variant.name}-full-*"))
    assert stale, "the dead builder's full PCH directory"
    runs = _full_runs(root.parent)
    monkeypatch.setenv(GATE, "/dev/null")  # the next compile goes through
    # Wanted once, so the next caller starts it again even without waiting for it; a waiting one then finds it.
    assert build_accel.build_variant(root, compiler, flags) == variant
    assert build_accel.build_variant(root, compiler, flags, wait_full=True) == variant
    assert accel_layout.has_full(variant) and not any(p.exists() for p in stale)
    assert _full_runs(root.parent) == runs + 1


# --- the child: a variant whose full PCH is not there yet ---------------------------------------------------

def test_the_child_offers_a_subset_only_variant_and_never_points_at_a_missing_full_pch(tmp_path: Path,
                                                                                     monkeypatch) -> None:  # noqa: ANN001
    variant = tmp_path / "v"
    (variant / build_accel.SUBSET_DIR / "torch").mkdir(parents=True)
    (variant / build_accel.SUBSET_DIR / build_accel.PCH_NAME).write_bytes(b"pch")
    (variant / build_accel.FLAGS_FILE).write_text(json.dumps({"flags": ["-fPIC"],
                                                              "compiler": build_accel.child_compiler()}))
    assert build_hooks.variants(str(tmp_path)) == [(["-fPIC"], str(variant))]
    offered = [(["-fPIC"], str(variant))]
    for name in ("CPATH", "JUDGE_PCH_CPATH", "JUDGE_PCH_FULL"):
        monkeypatch.setenv(name, "")  # recorded, so that whatever the hook sets is undone after the test
        monkeypatch.delenv(name)
    main_cpp = tmp_path / "main.cpp"
    main_cpp.write_text("#include <torch/extension.h>\ntorch::Tensor f(torch::Tensor x) { return x; }\n")
    build_hooks.offer_pch(["-fPIC"], offered, str(main_cpp))
    assert os.environ["CPATH"] == str(variant / build_accel.SUBSET_DIR)
    # The subset failed: torch's own header, not the variant's directory without its .gch.
    assert build_hooks.full_pch_instead() and "CPATH" not in os.environ
    assert not build_hooks.no_pch_instead()  # nothing left to give up: its errors are torch's own
    main_cpp.write_text("#include <torch/extension.h>\nauto m = torch::nn::Linear(2, 2);\n")
    build_hooks.offer_pch(["-fPIC"], offered, str(main_cpp))
    assert "CPATH" not in os.environ and "JUDGE_PCH_FULL" not in os.environ


def _subset_only_cache(judge_config: JudgeConfig, cache_root: Path) -> tuple[Path, int | None]:
    """A cache root holding the session's -O2 variant as it is published, without its full PCH, and that variant's
    full lock held (the returned descriptor) so that no caller starts the full PCH: the state kept for the test."""
    compiler, flags = build_accel.torch_compile_flags("cpu", ("-O2",))
    session = build_accel.build_variant(build_accel.accel_root(judge_config.cache_root), compiler, flags)
    assert session is not None and (session / build_accel.SUBSET_DIR / build_accel.PCH_NAME).is_file()
    root = build_accel.accel_root(cache_root)
    root.mkdir(parents=True)
    copy = root / session.name
    shutil.copytree(session, copy, ignore=shutil.ignore_patterns(build_accel.USED_FILE))
    shutil.rmtree(copy / "torch", ignore_errors=True)  # the full PCH and its stub, if they are in yet: moved in last
    assert accel_layout.usable(copy) and not accel_layout.has_full(copy)
    return copy, pch_compilers.try_lock(root / f"{copy.name}.full.lock")


@pytest.mark.slow
def test_a_candidate_that_needs_the_full_header_is_judged_as_torch_builds_it_before_it_arrives(
        judge_config: JudgeConfig, tmp_path: Path) -> None:
    """A real sandboxed build against a variant whose full PCH is not there yet: a main.cpp that fails with the
    subset is compiled again against torch's own header and judged correct. (One that goes straight to the full
    header, such as a repeated include, gets CPATH cleared, as the unit test above shows: the build without
    accelerators, which tests/sandbox/test_accelerators_differential.py judges for every model-style file.)"""
    variant, lock = _subset_only_cache(judge_config, tmp_path / "cache")
    build = replace(judge_config, build_root=tmp_path / "builds", cache_root=tmp_path / "cache")
    run = replace(judge_config, build_root=tmp_path / "builds")  # the session's baselines
    try:
        frontend = (CORPUS / "cpu" / "kl_div_cpp_correct.py").read_text().replace(
            "#include <cmath>\n", "#include <cmath>\nstatic torch::OrderedDict<std::string, double> kScale;\n")
        assert "OrderedDict" in frontend
        prepared = prepare("kl_div", frontend, target="cpu", config=build)
        assert isinstance(prepared, PreparedCandidate), prepared.diagnosis
        assert "first its subset" in prepared.compile_log  # tried with the subset, which lacks OrderedDict
        assert f"{accel_layout.FULL_NOT_BUILT} (" in prepared.compile_log
        assert "main.cpp gets torch's own" in prepared.compile_log
        assert execute(prepared, "cpu", config=run).status == Status.CORRECT
        assert not accel_layout.has_full(variant), "the test's state changed under it"
        # The build told the parent that a full PCH was missing: it is wanted now (and would be compiled but for the
        # lock this test holds), so the next candidate that needs it finds it.
        assert (variant.parent / f"{variant.name}.full.wanted").exists()
    finally:
        pch_compilers.release(lock)


def test_the_parent_waits_for_the_full_pch_for_a_candidate_whose_text_wants_it() -> None:
    """A candidate naming torch's C++ frontend goes to the full PCH, so the parent waits for it rather than build it
    against torch's own header meanwhile. Model-written cpp_sources that include torch/extension.h again (load_inline
    puts one first) do not: the subset's stub stands for the whole header."""
    assert accel_layout.wants_full_header("x = 'auto m = torch::nn::Linear(2, 2);'")
    assert not accel_layout.wants_full_header((CORPUS / "cpu" / "model_kl_div_repeated_include.py").read_text())
    assert not accel_layout.wants_full_header((CORPUS / "cpu" / "kl_div_cpp_correct.py").read_text())
