"""The shared precompiled torch/extension.h (sandbox/build_accel.py, sandbox/build_hooks.py), for real.

Real g++, real bubblewrap builds, real locks between processes. The PCH variants live in the session's
cache root, like every other test's, so the corpus tests reuse what these build.
"""

from __future__ import annotations

import json
import multiprocessing
import os
import shlex
import stat
import subprocess
from dataclasses import replace
from pathlib import Path

from sandbox import Status, build_accel, build_hooks, judge
from sandbox.pipeline import PreparedCandidate, prepare

from .conftest import CORPUS

CORRECT = CORPUS / "cpu" / "kl_div_cpp_correct.py"  # extra_cflags=["-O2"]


def _variant(cache_root: Path, extra: tuple[str, ...]) -> Path:
    compiler, flags = build_accel.torch_compile_flags("cpu", extra)
    variant = build_accel.build_variant(build_accel.accel_root(cache_root), compiler, flags)
    assert variant is not None, "g++ could not precompile torch/extension.h here"
    return variant


def test_accelerated_build_judges_a_cpu_candidate_correctly(judge_config, tmp_path: Path) -> None:
    config = replace(judge_config, build_root=tmp_path / "builds")  # a fresh build, the session's PCH cache
    verdict = judge("kl_div", CORRECT.read_text(), "cpu", config=config)
    assert verdict.status == Status.CORRECT, verdict.diagnosis
    # The child chose the -O2 variant for main.cpp, inside the sandbox, from the read-only mount.
    variant = _variant(judge_config.cache_root, ("-O2",))
    assert json.loads((variant / build_accel.FLAGS_FILE).read_text())["flags"][-1] == "-O2"
    assert "offered the precompiled torch/extension.h" in verdict.compile_log


def test_gcc_really_reads_the_variant_it_is_offered(judge_config, tmp_path: Path) -> None:
    """What the child offers must be what g++ accepts: same flags, same compiler (`-H` marks a used PCH '!')."""
    config = replace(judge_config, build_root=tmp_path / "builds")
    prepared = prepare("kl_div", CORRECT.read_text(), target="cpu", config=config)
    assert isinstance(prepared, PreparedCandidate)
    main_cpp = next(prepared.build_dir.glob("ext/*/main.cpp"))
    compiler, flags = build_accel.torch_compile_flags("cpu", ("-O2",))
    chosen = build_hooks.choose([*flags, "-DTORCH_EXTENSION_NAME=kl_div_cpu"], build_hooks.variants(
        str(build_accel.accel_root(judge_config.cache_root))))
    assert chosen is not None
    proc = subprocess.run([*shlex.split(compiler), "-H", "-DTORCH_EXTENSION_NAME=kl_div_cpu", *flags, "-c",
                           str(main_cpp), "-o", str(tmp_path / "main.o")], capture_output=True, text=True,
                          env={**os.environ, "CPATH": chosen}, timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert f"! {chosen}/torch/extension.h.gch" in proc.stderr


# A compile error under the precompiled header: tests/corpus/cpu/compile_error.py is judged in test_corpus.py with
# the PCH on (the default), and must report its first main.cpp error lines there.


def test_only_harmless_literal_flags_are_precompiled() -> None:
    source = '''
from torch.utils.cpp_extension import load_inline
a = load_inline(name="a", cpp_sources="", functions=[], extra_cflags=["-O3", "-Wall"])
b = load_inline(name="b", cpp_sources="", functions=[], extra_cflags=["-fplugin=/tmp/evil.so"])
c = load_inline(name="c", cpp_sources="", functions=[], extra_cflags=FLAGS)
d = load_inline(name="d", cpp_sources="", functions=[])
'''
    assert build_accel.wanted_flag_sets(source) == [("-O3", "-Wall"), ()]
    assert build_accel.wanted_flag_sets("import triton\n") == []


def test_a_compile_gets_a_variant_only_on_an_exact_match() -> None:
    offered = [(["-DX", "-isystem", "/t/include", "-fPIC", "-std=c++20"], "/v0"),
               (["-DX", "-isystem", "/t/include", "-fPIC", "-std=c++20", "-O2"], "/v2")]
    base = ["-DTORCH_EXTENSION_NAME=mine", "-DX", "-isystem /t/include", "-fPIC", "-std=c++20"]
    assert build_hooks.choose(base, offered) == "/v0"
    assert build_hooks.choose([*base, "-O2"], offered) == "/v2"
    assert build_hooks.choose([*base, "-O3"], offered) is None
    assert build_hooks.choose(["-I/mine", *base], offered) is None  # own headers could shadow torch's


# --- two first builds at once --------------------------------------------------------------------------

def _fake_torch_include(root: Path) -> Path:
    include = root / "include"
    (include / "torch").mkdir(parents=True)
    (include / "torch" / "extension.h").write_text("#pragma once\nstruct Judge { int x = 42; };\n")
    return include


def _counting_compiler(root: Path) -> Path:
    """A real g++ that also appends a line per run to a log: how many PCH builds happened."""
    script = root / "counting-g++"
    script.write_text(f"#!/bin/sh\ncase \"$*\" in *c++-header*) echo run >> {root / 'runs.log'};; esac\n"
                      "exec g++ \"$@\"\n")
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    return script


def _build(root: str, compiler: str, flags: list[str], barrier, results) -> None:  # noqa: ANN001 - mp objects
    barrier.wait()  # both processes ask for the same variant at the same moment
    results.put(str(build_accel.build_variant(Path(root), compiler, flags)))


def test_two_concurrent_first_builds_build_once_and_leave_a_whole_pch(tmp_path: Path) -> None:
    include = _fake_torch_include(tmp_path)
    compiler = str(_counting_compiler(tmp_path))
    flags = ["-isystem", str(include), "-fPIC", "-std=c++17"]
    root = tmp_path / "accel"
    ctx = multiprocessing.get_context("spawn")
    barrier, queue = ctx.Barrier(2), ctx.Queue()
    workers = [ctx.Process(target=_build, args=(str(root), compiler, flags, barrier, queue)) for _ in range(2)]
    for worker in workers:
        worker.start()
    results = [queue.get(timeout=300) for _ in workers]
    for worker in workers:
        worker.join(timeout=60)
        assert worker.exitcode == 0
    assert results[0] == results[1] != "None"
    variant = Path(results[0])
    assert (tmp_path / "runs.log").read_text().count("run") == 1, "the PCH was built more than once"
    assert not list(root.glob(".tmp-*")), "a builder left its temporary directory"
    assert json.loads((variant / build_accel.FLAGS_FILE).read_text())["flags"] == flags
    # g++ accepts what was left: the PCH is whole.
    (tmp_path / "use.cpp").write_text("#include <torch/extension.h>\nint main() { return Judge{}.x - 42; }\n")
    proc = subprocess.run(["g++", "-H", "-Winvalid-pch", *flags, str(tmp_path / "use.cpp"), "-o",
                           str(tmp_path / "use")], capture_output=True, text=True, env={**os.environ,
                                                                                       "CPATH": str(variant)})
    assert proc.returncode == 0, proc.stderr
    assert f"! {variant}/torch/extension.h.gch" in proc.stderr
    assert subprocess.run([str(tmp_path / "use")]).returncode == 0


def test_a_variant_that_cannot_be_built_is_recorded_and_not_retried(tmp_path: Path) -> None:
    include = _fake_torch_include(tmp_path)
    (include / "torch" / "extension.h").write_text("#error not a header\n")
    compiler = str(_counting_compiler(tmp_path))
    flags = ["-isystem", str(include), "-std=c++17"]
    root = tmp_path / "accel"
    assert build_accel.build_variant(root, compiler, flags) is None
    assert build_accel.build_variant(root, compiler, flags) is None
    assert (tmp_path / "runs.log").read_text().count("run") == 1
    assert "not a header" in next(root.glob("*.failed")).read_text()
    assert build_hooks.variants(str(root)) == []
