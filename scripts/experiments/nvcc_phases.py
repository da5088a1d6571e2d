"""Where a fresh CUDA candidate's build time goes: nvcc's own per-phase timer on the candidate's `.cu`.

Issue 12's build target (<= 25 s p50, 8 builds at once on 16 cores) depends on what a build spends its CPU on.
`load_inline` writes the candidate's CUDA source to a `.cu` file and compiles it with nvcc beside `main.cpp`
(the bindings, which the precompiled header serves); this script compiles that `.cu` alone, with torch's include
paths and its default nvcc flags, under `nvcc -time`, and prints each phase's seconds: the host preprocessing,
cudafe++ (the host front end), cicc (the device front end and optimiser), ptxas, and the host compiler.

It needs no GPU: nvcc and torch's headers suffice. The CPU wheel of torch lacks one generated CUDA header
(`c10/cuda/impl/cuda_cmake_macros.h`); a stand-in is put first on the include path when it is missing.

    python scripts/experiments/nvcc_phases.py tests/corpus/cuda/kl_div_fast.py --arch 9.0
    python scripts/experiments/nvcc_phases.py tests/corpus/cuda/kl_div_fast.py --extra=-Xcompiler=-O1  # one flag

The candidate file is read, never run: its CUDA source is the longest string literal that declares a kernel.
"""

from __future__ import annotations

import argparse
import ast
import csv
import shutil
import subprocess
import sys
import sysconfig
import tempfile
import time
from pathlib import Path


def cuda_source(path: Path) -> str:
    """The longest string literal in the candidate that declares a `__global__` function."""
    found = [node.value for node in ast.walk(ast.parse(path.read_text()))
             if isinstance(node, ast.Constant) and isinstance(node.value, str) and "__global__" in node.value]
    if not found:
        raise SystemExit(f"{path}: no string literal declares a __global__ function")
    return max(found, key=len)


def nvcc_command(cu: Path, work: Path, arch: str, extra: list[str]) -> list[str]:
    """nvcc as `load_inline` calls it for a `.cu` (include paths, torch's common flags, one architecture)."""
    from torch.utils import cpp_extension

    includes = cpp_extension.include_paths()  # nvcc adds its own CUDA include directory
    stub = work / "stub"
    if not any((Path(p) / "c10/cuda/impl/cuda_cmake_macros.h").exists() for p in includes):
        (stub / "c10/cuda/impl").mkdir(parents=True)
        (stub / "c10/cuda/impl/cuda_cmake_macros.h").write_text("#pragma once\n#define C10_CUDA_BUILD_SHARED_LIBS\n")
        includes = [str(stub), *includes]
    number = arch.replace(".", "")
    return ["nvcc", *(f"-I{p}" for p in includes), "-isystem", sysconfig.get_paths()["include"],
            "-DTORCH_EXTENSION_NAME=phases", "-DTORCH_API_INCLUDE_EXTENSION_H", "-D_GLIBCXX_USE_CXX11_ABI=1",
            *cpp_extension.COMMON_NVCC_FLAGS, f"-gencode=arch=compute_{number},code=compute_{number}",
            f"-gencode=arch=compute_{number},code=sm_{number}", "--compiler-options", "-fPIC", "-std=c++20",
            *extra, "-c", str(cu), "-o", str(work / "cuda.o"), "-time", str(work / "phases.csv")]


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("candidate", type=Path)
    parser.add_argument("--arch", default="9.0", help="one architecture, as in TORCH_CUDA_ARCH_LIST")
    parser.add_argument("--extra", action="append", default=[], help="another nvcc flag (repeatable)")
    args = parser.parse_args()
    if shutil.which("nvcc") is None:
        raise SystemExit("nvcc is not on PATH")
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        cu = work / "cuda.cu"
        cu.write_text(cuda_source(args.candidate))
        command = nvcc_command(cu, work, args.arch, args.extra)
        started = time.monotonic()
        done = subprocess.run(command, capture_output=True, text=True)
        wall = time.monotonic() - started
        if done.returncode != 0:
            print(done.stderr[-4000:], file=sys.stderr)
            raise SystemExit(f"nvcc failed ({done.returncode})")
        with open(work / "phases.csv", newline="") as fh:
            rows = [{k.strip(): (v or "").strip() for k, v in row.items()} for row in csv.DictReader(fh)]
    print(f"{args.candidate}: nvcc {wall:.1f} s wall, arch {args.arch}, extra flags {args.extra or 'none'}")
    print()
    print("| phase | seconds |\n|---|---|")
    total = 0.0
    for row in rows:
        seconds = float(row["metric"]) / 1e3  # nvcc -time writes milliseconds
        total += seconds
        print(f"| {row['phase name']}{' (' + row['arch'] + ')' if row.get('arch') else ''} | {seconds:.1f} |")
    print(f"| sum of phases | {total:.1f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
