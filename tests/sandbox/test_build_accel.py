"""The shared precompiled torch/extension.h (sandbox/build/accel.py, sandbox/child/build/hooks.py), for real.

Real g++, real bubblewrap builds, real locks between processes. The PCH variants live in the session's
cache root, like every other test's, so the corpus tests reuse what these build.
"""

from __future__ import annotations

import json
import multiprocessing
import os
import shlex
import shutil
import stat
import subprocess
import sys
import time
import uuid
from dataclasses import replace
from pathlib import Path

import pytest

from sandbox import Status, judge
from sandbox.build import accel as build_accel
from sandbox.child.build import hooks as build_hooks
from sandbox.pipeline import PreparedCandidate, prepare
from sandbox.shared import accel_layout

from .conftest import CORPUS

pytestmark = pytest.mark.slow  # real g++ and bubblewrap builds

CORRECT = CORPUS / "cpu" / "kl_div_cpp_correct.py"  # extra_cflags=["-O2"]


def _variant(cache_root: Path, extra: tuple[str, ...]) -> Path:
    compiler, flags = build_accel.torch_compile_flags("cpu", extra)
    variant = build_accel.build_variant(build_accel.accel_root(cache_root), compiler, flags, wait_full=True)
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
    assert "main.cpp built with the subset of torch/extension.h" in verdict.compile_log


def test_main_cpp_compiles_with_the_subset_pch_and_the_execution_child_keeps_it(judge_config, tmp_path: Path) -> None:
    config = replace(judge_config, build_root=tmp_path / "builds")
    prepared = prepare("kl_div", CORRECT.read_text(), target="cpu", config=config)
    assert isinstance(prepared, PreparedCandidate)
    assert "main.cpp built with the subset of torch/extension.h" in prepared.compile_log
    ext_dir = next(prepared.build_dir.glob("ext/*/main.cpp")).parent
    deps = subprocess.run(["ninja", "-t", "deps", "main.o"], cwd=ext_dir, capture_output=True, text=True).stdout
    assert "main.cpp" in deps and build_accel.SUBSET_DIR not in deps  # g++ lists no header read from a PCH
    built = (ext_dir / ".ninja_log").read_text()
    # The execution child runs the same load_inline without the hooks (no CPATH): ninja must find main.o up to
    # date, or it would compile main.cpp again while the candidate holds its turn.
    verdict = judge("kl_div", CORRECT.read_text(), "cpu", config=config)
    assert verdict.status == Status.CORRECT, verdict.diagnosis
    assert (ext_dir / ".ninja_log").read_text() == built, "the execution child's ninja rebuilt something"


def test_gcc_really_reads_the_subset_it_is_offered(judge_config, tmp_path: Path) -> None:
    variant = _variant(judge_config.cache_root, ("-O2",))
    subset = build_hooks.subset_of(str(variant))
    assert subset is not None, (variant.parent / f"{variant.name}/{build_accel.SUBSET_DIR}.failed")
    headers = list(Path(subset).rglob("*.h"))  # only the stub for a repeated include, never the PCH's source
    assert [h.relative_to(subset) for h in headers] == [Path("torch/extension.h")], headers
    assert headers[0].read_text() == accel_layout.SUBSET_STUB_TEXT, "the subset PCH's source was left beside it"
    compiler, flags = build_accel.torch_compile_flags("cpu", ("-O2",))
    (tmp_path / "main.cpp").write_text(
        "#include <torch/extension.h>\n"
        "#include <vector>\n"
        "#include <torch/extension.h>\n"  # again, as model-written cpp_sources do: the subset's stub, nothing more
        "torch::Tensor twice(torch::Tensor x) { return torch::full({2}, 2.0f) * x.sum(); }\n"
        "PYBIND11_MODULE(judge_subset, m) { m.def(\"twice\", torch::wrap_pybind_function(twice), \"twice\"); }\n")
    proc = subprocess.run([*shlex.split(compiler), "-H", "-Winvalid-pch", *flags, "-c", str(tmp_path / "main.cpp"),
                           "-o", str(tmp_path / "main.o")], capture_output=True, text=True,
                          env={**os.environ, "CPATH": subset}, timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert f"! {subset}/torch/extension.h.gch" in proc.stderr  # tensor arithmetic, pybind11: all in the subset
    read = [line.lstrip(". ") for line in proc.stderr.splitlines() if line.startswith(".") and "torch" in line]
    assert read == [f"{subset}/torch/extension.h"], read  # the second include read the stub and no torch header
    # torch's C++ frontend is not: such a main.cpp fails with it (and the child then offers the full PCH).
    (tmp_path / "frontend.cpp").write_text("#include <torch/extension.h>\n"
                                           "torch::OrderedDict<std::string, double> weights;\n")
    proc = subprocess.run([*shlex.split(compiler), *flags, "-c", str(tmp_path / "frontend.cpp"), "-o",
                           str(tmp_path / "frontend.o")], capture_output=True, text=True,
                          env={**os.environ, "CPATH": subset}, timeout=600)
    assert proc.returncode != 0 and "OrderedDict" in proc.stderr


def test_a_main_cpp_that_needs_the_frontend_is_built_again_with_the_full_pch(judge_config, tmp_path: Path) -> None:
    """`torch::OrderedDict` is declared by torch/extension.h but not by its subset: main.cpp fails with the
    subset, is compiled again with the full PCH, and the candidate is judged as torch would build it."""
    source = CORRECT.read_text().replace(
        "#include <cmath>\n", "#include <cmath>\nstatic torch::OrderedDict<std::string, double> kScale;\n")
    assert "OrderedDict" in source and build_hooks.FRONTEND.search(source) is None  # the subset is tried
    config = replace(judge_config, build_root=tmp_path / "builds")
    verdict = judge("kl_div", source, "cpu", config=config)
    assert verdict.status == Status.CORRECT, verdict.diagnosis
    assert "main.cpp needs more of torch/extension.h than its subset" in verdict.compile_log
    assert "OrderedDict" in verdict.compile_log  # the subset build's first error, for the build log
    assert "main.cpp built with the subset" not in verdict.compile_log
    assert "main.cpp (cpp_sources) did not compile" in verdict.details["build_advice"]


def test_a_main_cpp_that_names_the_frontend_gets_the_full_pch_without_trying(tmp_path: Path,
                                                                            monkeypatch) -> None:  # noqa: ANN001
    variant = tmp_path / "v"
    (variant / build_accel.SUBSET_DIR / "torch").mkdir(parents=True)
    (variant / build_accel.SUBSET_DIR / build_accel.PCH_NAME).write_bytes(b"pch")
    (variant / build_accel.PCH_NAME).parent.mkdir()
    (variant / build_accel.PCH_NAME).write_bytes(b"pch")
    offered = [(["-fPIC"], str(variant))]
    main_cpp = tmp_path / "main.cpp"
    for name in ("CPATH", "JUDGE_PCH_CPATH", "JUDGE_PCH_FULL"):
        monkeypatch.setenv(name, "")  # recorded, so that whatever the hook sets is undone after the test
        monkeypatch.delenv(name)
    main_cpp.write_text("#include <torch/extension.h>\ntorch::Tensor f(torch::Tensor x) { return x; }\n")
    build_hooks.offer_pch(["-fPIC"], offered, str(main_cpp))
    assert os.environ["CPATH"] == str(variant / build_accel.SUBSET_DIR)
    assert build_hooks.full_pch_instead() and os.environ["CPATH"] == str(variant)
    assert not build_hooks.full_pch_instead()  # once only
    main_cpp.write_text("#include <torch/extension.h>\nauto m = torch::nn::Linear(2, 2);\n")
    build_hooks.offer_pch(["-fPIC"], offered, str(main_cpp))
    assert os.environ["CPATH"] == str(variant) and "JUDGE_PCH_FULL" not in os.environ
    build_hooks.offer_pch(["-fPIC"], offered, str(main_cpp.with_name("other.cpp")), subset_first=False)
    assert os.environ["CPATH"] == str(variant)
    monkeypatch.setenv("CPATH", "/the/candidates/own")  # never touched
    build_hooks.offer_pch(["-fPIC"], offered, str(main_cpp))
    assert os.environ["CPATH"] == "/the/candidates/own"


def _child_main_command(prepared: PreparedCandidate) -> tuple[str, Path]:
    """The command the build child's ninja ran for main.cpp (its own compiler and flags, as torch wrote them in the
    sandbox), with the sandbox's /build mapped back to the build's directory; and that extension's directory."""
    ext_dir = next(prepared.build_dir.glob("ext/*/main.cpp")).parent
    done = subprocess.run(["ninja", "-t", "commands", "main.o"], cwd=ext_dir, capture_output=True, text=True,
                          check=True)
    return done.stdout.strip().splitlines()[-1].replace("/build/", f"{prepared.build_dir}/"), ext_dir


def _reads_pch(command: str, cwd: Path, cpath: str, tmp_path: Path) -> subprocess.CompletedProcess:
    """Run a main.cpp command again, writing elsewhere, with `-H` (a PCH g++ reads is marked '!', one it
    rejects 'x') and -Winvalid-pch (why it rejected it)."""
    mine = command.replace(" -o main.o", f" -o {tmp_path / 'main.o'}").replace("main.o.d", str(tmp_path / "main.o.d"))
    return subprocess.run(f"{mine} -H -Winvalid-pch", shell=True, cwd=cwd, capture_output=True, text=True,
                          env={**os.environ, "CPATH": cpath}, timeout=600)


def test_gcc_really_reads_the_pchs_with_the_childs_own_command(judge_config, tmp_path: Path, monkeypatch) -> None:
    """What the child is offered must be what its g++ accepts: the compiler torch chose inside the sandbox, not
    the judge's. With CXX naming another compiler in the judge's environment (the GPU machines set
    CXX=/opt/gcc/bin/g++), a PCH built with it was rejected, silently, by every build."""
    monkeypatch.setenv("CXX", "/nonexistent/other-g++")  # must not reach the PCH's compiler
    config = replace(judge_config, build_root=tmp_path / "builds")
    prepared = prepare("kl_div", CORRECT.read_text(), target="cpu", config=config)
    assert isinstance(prepared, PreparedCandidate)
    command, ext_dir = _child_main_command(prepared)
    variant = _variant(judge_config.cache_root, ("-O2",))
    for cpath in (str(variant), build_hooks.subset_of(str(variant))):
        assert cpath is not None, f"no subset PCH: {variant}/{build_accel.SUBSET_DIR}.failed"
        proc = _reads_pch(command, ext_dir, cpath, tmp_path)
        assert proc.returncode == 0, proc.stderr[-2000:]
        assert f"! {cpath}/torch/extension.h.gch" in proc.stderr, proc.stderr[:2000]
        assert "invalid-pch" not in proc.stderr


def test_the_pch_is_built_with_the_childs_compiler_whatever_cxx_says(monkeypatch) -> None:
    from sandbox.supervisor import child_path

    from sandbox.build.compiler import toolchain

    monkeypatch.setenv("CXX", "/opt/gcc/bin/g++")
    compiler, _ = build_accel.torch_compile_flags("cpu", ())
    assert compiler == shutil.which("c++", path=child_path())
    assert f"c++ {compiler} " in toolchain("cpu")  # builds are keyed by that compiler too


# A compile error under the precompiled header: tests/corpus/cpu/compile_error.py is judged in test_corpus.py with
# the PCH on (the default), and must report its first main.cpp error lines there.


def test_a_pch_built_by_another_compiler_is_not_offered(tmp_path: Path, capsys) -> None:  # noqa: ANN001
    """The child checks the compiler a variant was built with against the one torch runs there: a mismatch
    would make g++ reject the PCH silently (what happened on the GPU machines)."""
    for name, compiler in (("theirs", "/opt/other-gcc/bin/g++"), ("ours", build_accel.child_compiler())):
        (tmp_path / name / "torch").mkdir(parents=True)
        (tmp_path / name / build_accel.PCH_NAME).write_bytes(b"pch")
        (tmp_path / name / build_accel.FLAGS_FILE).write_text(json.dumps({"flags": ["-fPIC"], "compiler": compiler}))
    assert "built with /opt/other-gcc/bin/g++" in build_hooks.compiler_mismatch("/opt/other-gcc/bin/g++")
    assert build_hooks.compiler_mismatch(build_accel.child_compiler()) is None
    (tmp_path / "ours" / build_accel.FLAGS_FILE).unlink()
    assert build_hooks.install(str(tmp_path), slim_headers=False) is False  # nothing left to offer
    assert "is not offered: it was built with /opt/other-gcc/bin/g++" in capsys.readouterr().err


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


def test_after_the_full_pch_main_cpp_gets_none_and_the_compile_reads_a_mirror(tmp_path: Path,
                                                                              monkeypatch) -> None:  # noqa: ANN001
    """The last fallback (CPATH cleared), once, only after the full PCH; and while ninja runs, CPATH names the
    extension's own mirror: the stub as a plain file (ninja may record it), the .gch as a link removed after."""
    variant = tmp_path / "v"
    (variant / "torch").mkdir(parents=True)
    (variant / build_accel.PCH_NAME).write_bytes(b"pch")
    for name in ("CPATH", "JUDGE_PCH_CPATH", "JUDGE_PCH_FULL"):
        monkeypatch.setenv(name, "")
        monkeypatch.delenv(name)
    build_hooks.offer_pch(["-fPIC"], [(["-fPIC"], str(variant))], None, subset_first=False)
    assert os.environ["CPATH"] == str(variant)
    ext = tmp_path / "ext" / "name"
    ext.mkdir(parents=True)
    mirror = build_hooks.mirror_pch(ext)
    assert mirror is not None and os.environ["CPATH"] == str(mirror)
    assert (mirror / "torch" / "extension.h").read_text() == build_accel.STUB_TEXT
    assert (mirror / build_accel.PCH_NAME).resolve() == (variant / build_accel.PCH_NAME).resolve()
    build_hooks.unmirror_pch(mirror)
    assert os.environ["CPATH"] == str(variant) and not (mirror / build_accel.PCH_NAME).is_symlink()
    assert (mirror / "torch" / "extension.h").is_file()
    assert build_hooks.no_pch_instead() and "CPATH" not in os.environ
    assert not build_hooks.no_pch_instead()
    assert build_hooks.mirror_pch(ext) is None


# --- the compilers die with the process that started them ------------------------------------------------

_START_BUILD = """\
import sys
from pathlib import Path
from sandbox.build import accel as build_accel
from sandbox.build import pch_compilers
compiler, flags = build_accel.torch_compile_flags("cpu", ())
build_accel.build_variant(Path(sys.argv[1]), compiler, flags)
"""


def _marked(mark: str) -> dict[int, str]:
    """Processes whose environment carries `mark` (every descendant of the marked process inherits it): pid -> comm."""
    found = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            if mark.encode() in (entry / "environ").read_bytes().split(b"\0"):
                found[int(entry.name)] = (entry / "comm").read_text().strip()
        except OSError:  # gone meanwhile, or a zombie
            continue
    return found


def _wait(condition, timeout: float) -> bool:  # noqa: ANN001
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.1)
    return condition()


def test_a_killed_builder_takes_its_pch_compilers_with_it(tmp_path: Path) -> None:
    """SIGKILL of the process building the shared PCH (a worker, here a bare Python process) while its compiler runs
    (the subset PCH's, or the full one's where torch has no subset; a full PCH wanted later is started the same way,
    `pch_compilers.start_compiler`): the driver and its cc1plus are gone soon after, none left compiling for
    nobody."""
    compiler, flags = build_accel.torch_compile_flags("cpu", ())
    mark = f"JUDGE_TEST_PCH_MARK={uuid.uuid4().hex}"
    name, value = mark.split("=", 1)
    builder = subprocess.Popen([sys.executable, "-c", _START_BUILD, str(tmp_path / "accel")],
                               env={**os.environ, name: value})
    try:
        compiling = lambda: "cc1plus" in _marked(mark).values()  # noqa: E731
        assert _wait(compiling, 180), f"the PCH compilers never started: {_marked(mark)}"
        builder.kill()
        builder.wait()
        left = lambda: not _marked(mark)  # noqa: E731
        assert _wait(left, 30), f"left running after their builder was killed: {_marked(mark)}"
    finally:
        builder.kill()
        for pid in _marked(mark):  # only this test's own processes, found by its mark
            try:
                os.kill(pid, 9)
            except ProcessLookupError:
                pass
