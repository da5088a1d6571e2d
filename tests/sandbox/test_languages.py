"""The kernel languages (sandbox/shared/languages.py): their kernels are recognised among the device kernels that ran,
their JIT caches are in the candidate's build directory, and a host lists exactly the ones that import there.

The device kernel names below are the ones the pinned versions produced for these sources (CuTe DSL 4.8.1's
`kernel_info`, TileLang 0.1.15's generated `__global__`), compiled for sm_90a on the CPU machine.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from reference import get_task
from sandbox import supervisor
from sandbox.shared import languages
from sandbox.static_checks import check_source, supported_languages
from service.prompts import EXAMPLES

from .conftest import CORPUS

RAN_ELSEWHERE = ["void at::native::reduce_kernel<512, 1, at::native::ReduceOp<float>>(at::native::ReduceOp<float>)",
                 "void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctorOnSelf_add<float>>()",
                 "aten::add", "cudaLaunchKernel"]
"""Names the profiler reports for PyTorch's own work: never the candidate's."""


def own(source: str, ran: list[str]) -> list[str]:
    """The device kernels of `ran` the harness counts as the candidate's (sandbox/child/harness.py `_evidence`)."""
    names = languages.kernel_names(source)
    return [n for n in ran if any(k in n for k in names)]


@pytest.mark.parametrize(("language", "ran"), [
    ("cute", "kernel_cutlass_add_kernel_tensorptrf32generico10001_tensorptrf32generico10001_tensorptrf32generico1"),
    ("tilelang", "add_kernel"),
    ("triton", "add_kernel"),
    ("cuda", "elementwise_add_kernel(float const*, float const*, float*, int)"),
])
def test_the_prompt_examples_kernels_are_recognised_and_torchs_are_not(language: str, ran: str) -> None:
    assert own(EXAMPLES[language], [ran, *RAN_ELSEWHERE]) == [ran]


@pytest.mark.parametrize(("name", "kernel"), [
    ("kl_div_cute.py", "kernel_cutlass_kl_rows_kernel"),
    ("cross_entropy_cute.py", "kernel_cutlass_ce_rows_kernel"),
    ("kl_div_tilelang.py", "kl_div_rows_main_kernel"),
    ("cross_entropy_tilelang.py", "ce_rows_main_kernel"),
    ("kl_div_triton.py", "kl_partials"),
])
def test_each_language_corpus_file_declares_the_kernel_the_device_will_name(name: str, kernel: str) -> None:
    source = (CORPUS / "cuda" / name).read_text()
    assert kernel in languages.kernel_names(source), languages.kernel_names(source)
    assert own(source, RAN_ELSEWHERE) == []


def test_a_cute_kernel_method_and_a_stacked_decorator_are_found() -> None:
    """CuTe DSL's class-based kernels are methods named `kernel` (device name kernel_cutlass_kernel_<class>_...)."""
    source = ("class Op:\n    @cute.kernel\n    def kernel(self, g):\n        pass\n\n"
              "@T.prim_func\n@some.other\ndef rows_main(A):\n    pass\n")
    assert languages.kernel_names(source) >= {"kernel_cutlass_kernel", "rows_main_kernel"}
    assert own(source, ["kernel_cutlass_kernel___main__Op_object_at__tensorptrf32generico321_0"])


@pytest.mark.parametrize(("arch_list", "target"), [
    ("9.0", "sm_90a"), ("9.0a", "sm_90a"), ("8.0;9.0", "sm_90a"), ("9.0+PTX", "sm_90a"), ("8.6", "sm_86"),
    ("10.0f", "sm_100f"), ("8.0 9.0a", "sm_90a"),
])
def test_the_jit_target_is_the_newest_arch_with_its_suffix_once(arch_list: str, target: str) -> None:
    """The GPU hosts' TORCH_CUDA_ARCH_LIST is "9.0a": its suffix is kept, never doubled (CuTe DSL raised
    KeyError 'sm_90aa' on an H100 when it was)."""
    env = languages.jit_env(arch_list)
    assert env["CUTE_DSL_ARCH"] == target and f'"arch": "{target}"' in env["TILELANG_DEFAULT_TARGET"]


def test_the_jit_caches_are_in_the_build_directory(judge_config) -> None:  # noqa: ANN001
    env = supervisor.child_env(judge_config, supervisor.ChildPaths(build="/build", code="/judge"))
    assert env["TRITON_CACHE_DIR"] == "/build/triton"
    assert env["CUTE_DSL_CACHE_DIR"] == "/build/cute" and env["TILELANG_CACHE_DIR"] == "/build/tilelang"


def test_a_language_is_judged_exactly_when_it_imports(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Installing CuTe DSL and TileLang (here: real packages of those names on the path) makes the host list them,
    in the verdict on a language it still cannot judge, and stops refusing their candidates."""
    kl = get_task("kl_div")
    cupy = ("import torch\nimport cupy\n"
            "class ModelNew(torch.nn.Module):\n    def forward(self, p, t):\n        return p\n")
    assert languages.available()[0].id == "cuda"
    for package in ("cutlass", "tilelang"):
        (tmp_path / package).mkdir()
        (tmp_path / package / "__init__.py").write_text("")
    monkeypatch.syspath_prepend(str(tmp_path))
    assert [language.id for language in languages.available()][-2:] == ["cute", "tilelang"]
    message = check_source(cupy, kl.forbidden_python_names, kl.forbidden_aten_ops).findings[0].message
    assert "CuTe DSL kernels (nvidia-cutlass-dsl, @cute.kernel)" in message and "TileLang kernels" in message
    assert "PyTorch operators" == supported_languages()[-1]
    for name in ("kl_div_cute.py", "kl_div_tilelang.py"):
        source = (CORPUS / "cuda" / name).read_text()
        assert [f.rule for f in check_source(source, kl.forbidden_python_names, kl.forbidden_aten_ops).findings] == []


LANGUAGE_FILES = [path for folder in (CORPUS / "cuda", CORPUS / "hostile" / "cuda")
                  for pattern in ("*cute*", "*tilelang*") for path in sorted(folder.glob(pattern + ".py"))]


def test_every_language_has_honest_files_for_both_tasks_and_an_attack() -> None:
    names = {path.name for path in LANGUAGE_FILES}
    for language in ("cute", "tilelang"):
        assert {f"kl_div_{language}.py", f"cross_entropy_{language}.py"} <= names
        assert any(language in name and name.startswith("c") and name[1].isdigit() for name in names), language


@pytest.mark.parametrize("path", LANGUAGE_FILES, ids=lambda p: p.name)
def test_where_the_language_is_not_installed_its_corpus_file_is_refused_before_any_build(path: Path,
                                                                                        judge_config) -> None:  # noqa: ANN001
    """The clear verdict of a host without the [languages] extra: no build, no device. With it, the file builds."""
    from sandbox import Status, prepare
    from sandbox.verdict import Verdict

    from .conftest import corpus_meta

    verdict = prepare(corpus_meta(path)["task"], path.read_text(), target="cpu", config=judge_config)
    if languages.installed("cutlass" if "cute" in path.stem else "tilelang"):
        assert not isinstance(verdict, Verdict), verdict.diagnosis
        return
    assert isinstance(verdict, Verdict) and verdict.status is Status.COMPILE_ERROR, verdict
    assert verdict.details == {"stage": "static_checks", "rule": "unsupported_language"}
    assert "a kernel language this judge cannot run" in verdict.diagnosis


PRECOMPILING = '''import os
import torch
import torch.nn as nn
import tilelang


class ModelNew(nn.Module):
    def forward(self, predictions, targets):
        # Where the real TileLang compiles (and caches) its kernel for this shape; the launch fails without a device.
        os.makedirs(os.environ["TILELANG_CACHE_DIR"], exist_ok=True)
        with open(os.path.join(os.environ["TILELANG_CACHE_DIR"], "calls.txt"), "a") as log:
            log.write(f"{tuple(predictions.shape)} {predictions.dtype} {tuple(targets.shape)} {targets.dtype} "
                      f"{os.environ['TILELANG_DEFAULT_TARGET']} {torch.cuda.is_available()}\\n")
        raise RuntimeError("no device to launch on")
'''


def test_a_tilelang_candidate_compiles_every_judged_shape_in_the_build_stage(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, judge_config) -> None:  # noqa: ANN001
    """The build child calls ModelNew once per judged shape (the CPU target's here: cpu_shape and cpu_extra_shapes)
    on host tensors of the inputs' dtypes, with TileLang's cache in the build directory and the card's target
    pinned; the failed launch is one line of the build log, not a build failure. `tilelang` here is a package of
    that name whose import does nothing: the build child gets it as it gets an installed one, through the host's
    PYTHONPATH (sandbox/isolation.py extra_python_path)."""
    from sandbox import prepare
    from sandbox.verdict import Verdict

    (tmp_path / "tilelang").mkdir()
    (tmp_path / "tilelang" / "__init__.py").write_text("")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(tmp_path), os.environ.get("PYTHONPATH")])))
    task = get_task("cross_entropy")
    prepared = prepare("cross_entropy", PRECOMPILING, target="cpu", config=judge_config)
    assert not isinstance(prepared, Verdict), prepared.diagnosis
    log = Path(prepared.build_dir) / "tilelang" / "calls.txt"
    assert log.is_file(), prepared.compile_log
    calls = log.read_text().splitlines()
    shapes = [task.cpu_shape, *task.cpu_extra_shapes]
    assert [call.split(" torch.")[0] for call in calls] == [str(tuple(shape)) for shape in shapes], calls
    assert all(f"torch.float32 {(shape[0],)} torch.int64" in call for call, shape in zip(calls, shapes)), calls
    assert all('{"kind": "cuda", "arch": "sm_' in call and call.endswith("False") for call in calls), calls
    assert "[judge] precompiled for" in prepared.compile_log and "no device to launch on" in prepared.compile_log


CUTE_TWICE = """import sys
import cutlass
import cutlass.cute as cute


@cute.jit
def twice(n: cutlass.Int32):
    cute.printf("%d", n * 2)


if sys.argv[1] == "compile":
    cute.compile(twice, 3)
else:
    twice(3)
"""
"""A host-only `@cute.jit` function (no kernel, so no device to launch on): compiled the way candidates do
(`cute.compile`) or by a direct call, in a process of its own as each child is."""


@pytest.mark.skipif(not languages.installed("cutlass"), reason="CuTe DSL (the [languages] extra) is not installed")
def test_cute_compile_leaves_nothing_on_disk_for_the_execution_child_to_find(tmp_path: Path) -> None:
    """Why CuTe DSL is not in languages.PRECOMPILED: its disk cache, in the build directory as every child has it,
    is written and found again by a second process only for a direct call of a `@cute.jit` function; `cute.compile`
    neither writes nor reads it. A CuTe DSL release whose `cute.compile` leaves a file here fails this test, and
    the build stage could then compile CuTe candidates as it does TileLang's."""
    script = tmp_path / "twice.py"
    script.write_text(CUTE_TWICE)
    env = {**os.environ, **languages.child_env(str(tmp_path)), **languages.jit_env("9.0a"),
           "CUTE_DSL_LOG_TO_CONSOLE": "1", "CUTE_DSL_LOG_LEVEL": "20"}  # INFO: the DSL's cache hits and misses
    cache = Path(env["CUTE_DSL_CACHE_DIR"])
    assert cache == tmp_path / "cute"

    def run(how: str) -> str:
        done = subprocess.run([sys.executable, str(script), how], env=env, capture_output=True, text=True,
                              timeout=300, check=False)
        assert done.returncode == 0, done.stderr[-2000:]
        return done.stderr

    for _ in range(2):
        run("compile")
        assert not list(cache.glob("cute_dsl_*.mlir")), sorted(cache.iterdir())
    assert "JIT cache hit IN-FILE" not in run("call")
    written = list(cache.glob("cute_dsl_*.mlir"))
    assert len(written) == 1, written
    assert "JIT cache hit IN-FILE" in run("call")
    assert list(cache.glob("cute_dsl_*.mlir")) == written
