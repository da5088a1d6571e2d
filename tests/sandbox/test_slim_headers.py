"""Slim torch headers for a candidate's .cu (sandbox/child/build/slim_headers.py) and the build hook that falls back to
torch's own (sandbox/child/build/hooks.py), with real nvcc and ninja.

Most builds here use a miniature torch include tree (an ATen/ATen.h whose operator table declares one
function, a torch/types.h, one operator header), so that each nvcc run takes seconds; one builds a typical
candidate's .cu against this torch's real headers. The builds go through torch's own ninja path in a child
process (tests/sandbox/children/build_objects.py).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch.utils.cpp_extension as ext

from sandbox.build import advice as build_advice
from sandbox.child.build import hooks as build_hooks
from sandbox.build import compiler as build
from sandbox.child.build import slim_headers
from sandbox.config import JudgeConfig

pytestmark = pytest.mark.slow  # real nvcc and ninja builds

DRIVER = Path(__file__).resolve().parent / "children" / "build_objects.py"
needs_nvcc = pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc is not installed")


def mini_torch(root: Path) -> Path:
    """A torch include tree in miniature, laid out like the real one."""
    files = {
        "ATen/ATen.h": "#pragma once\n#include <ATen/core/Tensor.h>\n#include <ATen/Functions.h>\n",
        "ATen/core/Tensor.h": "#pragma once\nnamespace at { struct Tensor { int n = 3; }; }\n",
        "ATen/Functions.h": "#pragma once\nnamespace at { inline int only_in_the_full_headers() { return 1; } }\n",
        "ATen/ops/scale.h": "#pragma once\nnamespace at { inline int scale(int x) { return 2 * x; } }\n",
        "torch/types.h": ("#pragma once\n#include <ATen/ATen.h>\n#include <torch/library.h>\n"
                          "namespace torch { using namespace at; constexpr int kAnswer = 42; }\n"),
        "torch/library.h": "#pragma once\nnamespace torch { inline int registers_operators() { return 0; } }\n",
        "torch/extension.h": "#pragma once\n#include <torch/types.h>\n",
    }
    include = root / "include"
    for name, text in files.items():
        (include / name).parent.mkdir(parents=True, exist_ok=True)
        (include / name).write_text(text)
    return include


def kernel(body: str) -> str:
    return ("#include <torch/types.h>\n#include <cuda_runtime.h>\n#include <torch/extension.h>\n"
            "__global__ void fill(int* out, int v) { out[threadIdx.x] = v; }\n" + body)


def build_objects(tmp_path: Path, sources: dict[str, str], include: list[Path], *, hooks: bool = True
                  ) -> tuple[dict, str, Path]:
    build_dir = tmp_path / "ext" / "candidate_ext"
    build_dir.mkdir(parents=True, exist_ok=True)
    paths = []
    for name, text in sources.items():
        (build_dir / name).write_text(text)
        paths.append(str(build_dir / name))
    argv = [sys.executable, str(DRIVER), str(build_dir), *paths, *(f"--include={d}" for d in include)]
    env = {k: v for k, v in os.environ.items() if k != "NVCC_APPEND_FLAGS"}
    done = subprocess.run([*argv, *([] if hooks else ["--no-hooks"])], capture_output=True, text=True, env=env,
                          timeout=600)
    assert done.stdout.strip(), done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1]), done.stderr, build_dir


def ninja_has_nothing_to_do(build_dir: Path) -> tuple[bool, str]:
    """What the execution child's ninja would decide about this build (same path, no hooks, no NVCC flags)."""
    env = {k: v for k, v in os.environ.items() if k != "NVCC_APPEND_FLAGS"}
    done = subprocess.run(["ninja", "-n", "-d", "explain"], cwd=build_dir, capture_output=True, text=True, env=env)
    return "no work to do" in done.stdout, done.stdout + done.stderr


# --- the header itself ----------------------------------------------------------------------------------

def test_the_slim_header_is_torchs_own_text_less_the_operator_tables(tmp_path: Path) -> None:
    include = mini_torch(tmp_path)
    built = slim_headers.write(tmp_path / "build", ["int y = scale(2); int sum = 0;"], [include])
    assert built is not None and built.operators == ("scale",)  # `sum` has no header here; `scale` has
    text = (built.directory / slim_headers.SLIM_HEADER).read_text()
    assert "#include <ATen/core/Tensor.h>" in text and "#include <ATen/ops/scale.h>" in text
    assert "#include <ATen/Functions.h>" not in text and "#include <torch/library.h>" not in text
    assert "constexpr int kAnswer = 42;" in text  # torch/types.h's own declarations, verbatim
    for umbrella in slim_headers.UMBRELLAS:
        assert slim_headers.SLIM_HEADER in (built.directory / umbrella).read_text()
    slim_headers.remove(tmp_path / "build")
    assert not (tmp_path / "build" / slim_headers.SLIM_DIR).exists()


def test_the_real_torch_yields_a_slim_header() -> None:
    dirs = [Path(p) for p in ext.include_paths()]
    text = slim_headers.slim_header_text(dirs, ("empty", "zeros"))
    assert text is not None
    assert "#include <ATen/ops/empty.h>" in text and "namespace torch" in text and "kFloat32" in text
    assert "#include <ATen/Functions.h>" not in text and "variable_factories.h>" not in text
    assert slim_headers.operators_named(["auto o = torch::empty_like(x); float sum;"], dirs) == ("empty_like", "sum")


def test_a_cu_whose_meaning_could_differ_is_built_with_the_full_headers() -> None:
    assert "requires_grad" in slim_headers.skip_reason("torch::zeros({4}, opts.requires_grad(true));")
    assert "pybind11" in slim_headers.skip_reason("#include <pybind11/pybind11.h>")
    assert "torch::nn" in slim_headers.skip_reason("torch::nn::functional::relu(x);")
    assert slim_headers.skip_reason("auto out = torch::empty({n}, x.options());") is None


def test_the_first_error_is_reported_without_the_location_the_error_parser_reads() -> None:
    log = "FAILED: cuda.cuda.o\n/build/ext/a/cuda.cu(12): error: identifier \"only\" is undefined\n"
    message = slim_headers.first_error(log)
    assert message == 'identifier "only" is undefined'
    assert build.first_errors(f"[judge] a: .cu needs torch's full headers (slim build: {message})") == []


# --- the hook, with real nvcc and ninja --------------------------------------------------------------------

@needs_nvcc
def test_a_cu_that_fits_builds_slim_and_ninja_then_has_nothing_to_do(tmp_path: Path) -> None:
    include = mini_torch(tmp_path)
    result, log, build_dir = build_objects(
        tmp_path, {"cuda.cu": kernel("int answer() { return torch::kAnswer + at::scale(1) + at::Tensor{}.n; }\n")},
        [include])
    assert result["ok"], result["error"]
    assert "built against the slim torch headers" in log
    assert (build_dir / slim_headers.SLIM_DIR / slim_headers.SLIM_HEADER).is_file()
    deps = subprocess.run(["ninja", "-t", "deps"], cwd=build_dir, capture_output=True, text=True).stdout
    assert slim_headers.SLIM_HEADER in deps  # nvcc read the slim header ...
    nothing, explain = ninja_has_nothing_to_do(build_dir)
    assert nothing, explain  # ... and the execution child's ninja, without the hook, keeps the object


@needs_nvcc
def test_a_cu_that_needs_the_full_headers_is_built_again_with_them(tmp_path: Path) -> None:
    include = mini_torch(tmp_path)
    result, log, build_dir = build_objects(
        tmp_path, {"cuda.cu": kernel("int f() { return at::only_in_the_full_headers(); }\n")}, [include])
    assert result["ok"], result["error"]
    assert "needs torch's full headers (slim build: " in log and "only_in_the_full_headers" in log
    assert not (build_dir / slim_headers.SLIM_DIR).exists()
    assert (build_dir / "cuda.cuda.o").is_file()
    deps = subprocess.run(["ninja", "-t", "deps"], cwd=build_dir, capture_output=True, text=True).stdout
    assert "ATen/Functions.h" in deps and slim_headers.SLIM_HEADER not in deps
    assert ninja_has_nothing_to_do(build_dir)[0]
    advice = build_advice.advice(log, 61.0)
    assert advice is not None and advice.startswith("This build took 61 s") and "only_in_the_full_headers" in advice


@needs_nvcc
def test_a_cu_that_does_not_compile_fails_with_the_full_headers_errors(tmp_path: Path) -> None:
    include = mini_torch(tmp_path)
    result, log, _ = build_objects(tmp_path, {"cuda.cu": kernel("int f() { return undeclared_thing; }\n")},
                                   [include])
    assert not result["ok"]
    assert "needs torch's full headers" in log  # tried slim, then full: the error is the full build's
    assert "undeclared_thing" in result["error"] and slim_headers.SLIM_HEADER not in result["error"]
    errors = build.first_errors(result["error"])
    assert errors and "undeclared_thing" in errors[0]


@needs_nvcc
def test_a_failing_main_cpp_is_not_blamed_on_the_slim_headers(tmp_path: Path) -> None:
    include = mini_torch(tmp_path)
    result, log, build_dir = build_objects(
        tmp_path, {"cuda.cu": kernel(""), "main.cpp": "int broken( { }\n"}, [include])
    assert not result["ok"] and "main.o" in result["error"]
    assert "full headers" not in log  # no second build: the .cu was not what failed
    assert (build_dir / slim_headers.SLIM_DIR).exists()  # nor were the slim headers taken away


@needs_nvcc
def test_a_cu_that_mentions_requires_grad_is_never_built_slim(tmp_path: Path) -> None:
    include = mini_torch(tmp_path)
    result, log, build_dir = build_objects(
        tmp_path, {"cuda.cu": kernel("// requires_grad\nint f() { return at::only_in_the_full_headers(); }\n")},
        [include])
    assert result["ok"], result["error"]
    assert "built with torch's full headers (the .cu mentions 'requires_grad')" in log
    assert not (build_dir / slim_headers.SLIM_DIR).exists()


@needs_nvcc
def test_a_typical_candidate_cu_builds_against_this_torchs_slim_headers(tmp_path: Path) -> None:
    """The real headers: a .cu as LLMs write them (extension.h, TORCH_CHECK, a factory, AT_DISPATCH)."""
    stub = tmp_path / "stub"  # the CPU wheel lacks one generated CUDA header
    (stub / "c10/cuda/impl").mkdir(parents=True)
    (stub / "c10/cuda/impl/cuda_cmake_macros.h").write_text("#pragma once\n")
    source = (
        "#include <torch/types.h>\n#include <cuda.h>\n#include <cuda_runtime.h>\n"
        "#include <torch/extension.h>\n#include <c10/cuda/CUDAStream.h>\n"
        "template <typename T> __global__ void scale(const T* x, T* y, int64_t n) {\n"
        "  int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; if (i < n) y[i] = x[i] * T(2); }\n"
        "torch::Tensor scale_cuda(torch::Tensor x) {\n"
        "  TORCH_CHECK(x.is_cuda(), \"x must be a CUDA tensor\");\n"
        "  auto y = torch::empty_like(x); auto z = torch::zeros({1}, x.options().dtype(torch::kFloat32));\n"
        "  AT_DISPATCH_FLOATING_TYPES(x.scalar_type(), \"scale\", ([&] {\n"
        "    scale<scalar_t><<<(x.numel() + 255) / 256, 256, 0, c10::cuda::getCurrentCUDAStream()>>>(\n"
        "      x.data_ptr<scalar_t>(), y.data_ptr<scalar_t>(), x.numel()); }));\n"
        "  return y.view({-1}).contiguous();\n}\n")
    result, log, build_dir = build_objects(tmp_path, {"cuda.cu": source},
                                           [*map(Path, ext.include_paths()), stub])
    assert result["ok"], result["error"][-3000:]
    assert "built against the slim torch headers" in log
    header = (build_dir / slim_headers.SLIM_DIR / slim_headers.SLIM_HEADER).read_text()
    assert "#include <ATen/ops/empty_like.h>" in header and "#include <ATen/ops/zeros.h>" in header
    assert ninja_has_nothing_to_do(build_dir)[0]


# --- wiring ------------------------------------------------------------------------------------------------

def test_only_cuda_builds_are_offered_slim_headers(tmp_path: Path) -> None:
    config = JudgeConfig(cache_root=tmp_path, precompiled_headers=False)
    assert build.accelerators(config, "cuda", "")[0] == {"JUDGE_SLIM_HEADERS": "1"}
    assert build.accelerators(config, "cpu", "")[0] == {}
    off = JudgeConfig(cache_root=tmp_path, precompiled_headers=False, slim_headers=False)
    assert build.accelerators(off, "cuda", "")[0] == {}


def test_the_hook_reads_include_directories_as_torch_writes_them() -> None:
    flags = ["-DX", "-isystem /t/include", "-isystem /t/api", "-I/mine", "-I", "/other", "--expt-relaxed-constexpr"]
    assert build_hooks.include_dirs(flags) == [Path("/t/include"), Path("/t/api"), Path("/mine"), Path("/other")]


def test_no_advice_for_a_slim_build() -> None:
    log = "[judge] ext: .cu built against the slim torch headers (sandbox/child/build/slim_headers.py)"
    assert build_advice.advice(log) is None
