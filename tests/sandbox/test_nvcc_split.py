"""sandbox/build/nvcc_split.py: nvcc's two front ends side by side give nvcc's own object, dependencies and errors.

Real nvcc throughout (the development machine and CI have nvcc 13.0; no GPU is needed to compile). The one
fake is the mismatched module id, which a real nvcc does not produce on demand: shell commands in a plan.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from sandbox import sandboxed_process
from sandbox.build import nvcc_split
from sandbox.isolation import SandboxSpec

NVCC = shutil.which("nvcc")
pytestmark = [pytest.mark.skipif(NVCC is None, reason="needs nvcc"),  # installed on every machine that runs CI
              pytest.mark.slow]  # real nvcc compiles
TOOLKIT = str(Path(NVCC).resolve().parent.parent) if NVCC else ""
DEPS = ["--generate-dependencies-with-compile", "--dependency-output"]  # as torch's build.ninja runs nvcc
KERNEL = """
#include <cuda_runtime.h>
#include <cstdint>
static __device__ int hits;
__global__ void scale(float* x, float a, int64_t n) {
    int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
    if (i < n) { x[i] *= a; atomicAdd(&hits, 1); }
}
void launch(float* x, float a, int64_t n) { scale<<<(n + 255) / 256, 256>>>(x, a, n); }
"""


@pytest.fixture
def driver(tmp_path: Path) -> Path:
    return nvcc_split.install(tmp_path / "cache", sys.executable)


def _env(**extra: str) -> dict[str, str]:
    return {**os.environ, nvcc_split.ROOT_ENV: TOOLKIT, **extra}


def _deps(path: Path) -> tuple[str, set[str]]:
    target, files = path.read_text().replace("\\\n", " ").split(":", 1)
    return target.strip(), set(files.split())


def _section(obj: Path, name: str, out: Path) -> bytes:
    subprocess.run(["objcopy", "-O", "binary", f"--only-section={name}", str(obj), str(out)], check=True)
    return out.read_bytes()


def test_a_split_compile_gives_nvccs_device_code_symbols_and_dependencies(driver: Path, tmp_path: Path) -> None:
    (tmp_path / "k.cu").write_text(KERNEL)
    flags = ["-gencode=arch=compute_90,code=sm_90", "-O3", "--compiler-options", "'-fPIC'", "-std=c++17"]
    real = subprocess.run([NVCC, *DEPS, "real.o.d", *flags, "-c", "k.cu", "-o", "real.o"], cwd=tmp_path,
                          capture_output=True, text=True)
    split = subprocess.run([str(driver), *DEPS, "split.o.d", *flags, "-c", "k.cu", "-o", "split.o"], cwd=tmp_path,
                           capture_output=True, text=True, env=_env())
    assert real.returncode == 0 and split.returncode == 0, split.stdout + split.stderr
    record = json.loads((tmp_path / f"split.o{nvcc_split.RECORD_SUFFIX}").read_text())
    assert record["ids_equal"] is True and record["host_s"] > 0 and record["device_s"] > 0  # it did split
    assert _section(tmp_path / "real.o", ".nv_fatbin", tmp_path / "a") == \
        _section(tmp_path / "split.o", ".nv_fatbin", tmp_path / "b")  # the same kernels, byte for byte

    def symbols(obj: str) -> set[str]:
        names = subprocess.run(["nm", obj], cwd=tmp_path, capture_output=True, text=True, check=True).stdout
        # nvcc names one static initialiser after its temporary file (tmpxft_<pid>...): differs run to run
        return {line.split()[-1] for line in names.splitlines() if "tmpxft_" not in line}
    assert symbols("real.o") == symbols("split.o") and any("scale" in s for s in symbols("split.o"))
    real_target, real_files = _deps(tmp_path / "real.o.d")
    split_target, split_files = _deps(tmp_path / "split.o.d")
    assert (real_target, split_target) == ("real.o", "split.o")
    assert split_files == real_files and "k.cu" in split_files and len(split_files) > 50


@pytest.mark.parametrize("source", [
    "__global__ void k(float* x) { undefined_name = 1; }\n",  # cudafe++ fails (status 2)
    "#include <no_such_header.h>\n__global__ void k() {}\n",  # the preprocessor fails (status 1)
    "int host_only() { return 1; }\n__global__ void k(int* x) { *x = host_only(); }\n",  # host call from device
])
def test_a_compile_error_reads_exactly_as_nvccs(driver: Path, tmp_path: Path, source: str) -> None:
    (tmp_path / "bad.cu").write_text(source)
    real = subprocess.run([NVCC, *DEPS, "r.d", "-c", "bad.cu", "-o", "r.o"], cwd=tmp_path, capture_output=True,
                          text=True)
    split = subprocess.run([str(driver), *DEPS, "s.d", "-c", "bad.cu", "-o", "s.o"], cwd=tmp_path,
                           capture_output=True, text=True, env=_env())
    assert real.returncode != 0
    assert split.returncode == real.returncode
    assert split.stdout + split.stderr == real.stdout + real.stderr
    assert "error" in split.stdout and not (tmp_path / "s.o").exists()


@pytest.mark.parametrize("args", [["--version"], ["-E", "k.cu"], ["--fatbin", "k.cu", "-o", "k.fatbin"]])
def test_what_it_does_not_split_is_the_real_nvccs_work(driver: Path, tmp_path: Path, args: list[str]) -> None:
    (tmp_path / "k.cu").write_text(KERNEL)
    real = subprocess.run([NVCC, *args], cwd=tmp_path, capture_output=True)
    real_out = (tmp_path / "k.fatbin").read_bytes() if "--fatbin" in args else b""
    split = subprocess.run([str(driver), *args], cwd=tmp_path, capture_output=True, env=_env())
    assert split.returncode == real.returncode == 0
    if "--fatbin" in args:
        assert (tmp_path / "k.fatbin").read_bytes() == real_out
    else:
        assert split.stdout == real.stdout and len(split.stdout) > 20


def test_module_ids_that_differ_run_the_device_lane_again_with_cudafes(tmp_path: Path) -> None:
    """Whatever cicc computes for itself, the object carries cudafe++'s id, as nvcc's serial order would."""
    module = tmp_path / "id"
    fake_cicc = tmp_path / "cicc"
    fake_cicc.write_text('#!/bin/sh\n'  # writes its own id "device" when asked to, else copies the one it reads
                         'for a; do case $prev in --module_id_file_name) f=$a;; esac; prev=$a; done\n'
                         'case "$*" in *--gen_module_id_file*) echo device > "$f";; esac\n'
                         f'cp "$f" {tmp_path}/device.out\n')
    fake_cicc.chmod(0o755)
    steps = [
        nvcc_split.Step(f'echo host > {tmp_path}/h.ii', "host_pp"),
        nvcc_split.Step(f'echo dev > {tmp_path}/d.ii', "device_pp"),
        nvcc_split.Step(f'echo cudafe > {module} # --gen_module_id_file --module_id_file_name "{module}"', "cudafe"),
        nvcc_split.Step(f'{fake_cicc} --module_id_file_name "{module}"', "cicc"),
        nvcc_split.Step(f'cp {tmp_path}/device.out {tmp_path}/obj # -o "{tmp_path}/obj"', "compile"),
    ]
    plan = nvcc_split.Plan(env={}, steps=steps, host_ii=str(tmp_path / "h.ii"), device_ii=str(tmp_path / "d.ii"),
                           module_id_file=str(module))
    assert nvcc_split.run_plan(plan, dict(os.environ)) == 0
    assert (tmp_path / "obj").read_text() == "cudafe\n"
    record = json.loads((tmp_path / f"obj{nvcc_split.RECORD_SUFFIX}").read_text())
    assert record["ids_equal"] is False and "device_again_s" in record


def test_the_build_sandbox_runs_the_driver_in_nvccs_place(driver: Path, tmp_path: Path) -> None:
    """Bound over the toolkit's nvcc, the real toolkit beside it: torch's nvcc path runs the split, and the
    dependency file names headers where the execution child (the real nvcc) has them."""
    work = tmp_path / "work"
    work.mkdir()
    (work / "k.cu").write_text(KERNEL)
    binds = nvcc_split.sandbox_binds(driver, Path(NVCC))
    spec = SandboxSpec(argv=[NVCC, *DEPS, "k.o.d", "-c", "k.cu", "-o", "k.o"],
                       env={"PATH": f"{Path(NVCC).parent}:/usr/bin:/bin", "HOME": "/tmp"},
                       writable_dir=work, readonly_binds=binds)
    done = sandboxed_process.run(spec, "bwrap")
    assert done.returncode == 0, done.stdout + done.stderr
    assert json.loads((work / f"k.o{nvcc_split.RECORD_SUFFIX}").read_text())["ids_equal"] is True
    _, files = _deps(work / "k.o.d")
    assert any(f.startswith(TOOLKIT) for f in files) and not any(nvcc_split.REAL_ROOT in f for f in files)


def test_the_judge_binds_the_driver_only_for_cuda_builds_that_ask(tmp_path: Path, monkeypatch) -> None:  # noqa: ANN001
    from dataclasses import replace

    from torch.utils import cpp_extension

    from sandbox.build.compiler import accelerators
    from sandbox.config import JudgeConfig

    monkeypatch.setattr(cpp_extension, "CUDA_HOME", TOOLKIT)
    config = replace(JudgeConfig(), cache_root=tmp_path, precompiled_headers=False, split_nvcc=True,
                     isolation="bwrap")
    env, binds = accelerators(config, "cuda", "")
    real = Path(NVCC).resolve()
    assert binds[real.parent.parent] == nvcc_split.REAL_ROOT
    driver = next(host for host, inside in binds.items() if inside == str(real))
    assert os.access(driver, os.X_OK) and driver.read_text().startswith(f"#!{sys.executable} -B\n")
    assert env == {"JUDGE_SLIM_HEADERS": "1"}
    assert accelerators(replace(config, split_nvcc=False), "cuda", "")[1] == {}  # the default
    assert accelerators(config, "cpu", "")[1] == {}
