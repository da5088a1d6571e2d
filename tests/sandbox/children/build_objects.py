"""Compile sources to objects through torch's own ninja path, with the build child's hooks installed.

Run as a script by tests/sandbox/test_slim_headers.py (the hooks patch torch's module: a process of its
own keeps them out of the test run). torch's `_write_ninja_file_and_compile_objects` is what `load_inline`
uses less the link, which a CPU build of torch cannot do for CUDA (no libtorch_cuda); nvcc, ninja, the
hooks and the fallback are all real. On a CPU build of torch, CUDA_HOME is pointed at the nvcc on PATH and
torch.version.cuda is set, so that build.ninja asks nvcc for dependency files, as on a CUDA build.

    python build_objects.py BUILD_DIR SOURCE... [--include DIR]... [--no-hooks]

Prints one JSON line: {"ok": bool, "error": str}.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
from pathlib import Path

import torch
import torch.utils.cpp_extension as ext


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("build_dir", type=Path)
    parser.add_argument("sources", nargs="+", type=Path)
    parser.add_argument("--include", action="append", default=[], type=Path)
    parser.add_argument("--no-hooks", action="store_true")
    args = parser.parse_args()
    sys.path.insert(0, str(Path(__file__).resolve().parents[3]))
    if ext.CUDA_HOME is None:
        ext.CUDA_HOME = str(Path(shutil.which("nvcc")).resolve().parent.parent)
    if torch.version.cuda is None:
        torch.version.cuda = "13.0"
    if not args.no_hooks:
        from sandbox.child.build import hooks as build_hooks

        build_hooks.install(None, slim_headers=True)
    includes = [f"-isystem {d}" for d in args.include]
    objects = [str(args.build_dir / (s.stem + (".cuda.o" if s.suffix == ".cu" else ".o"))) for s in args.sources]
    try:
        ext._write_ninja_file_and_compile_objects(
            sources=[str(s) for s in args.sources], objects=objects, cflags=[*includes, "-fPIC", "-std=c++17"],
            post_cflags=[], cuda_cflags=[*includes, *ext.COMMON_NVCC_FLAGS, "-gencode=arch=compute_90,code=sm_90",
                                         "--compiler-options", "'-fPIC'", "-std=c++17"],
            cuda_post_cflags=[], cuda_dlink_post_cflags=[], sycl_cflags=[], sycl_post_cflags=[],
            sycl_dlink_post_cflags=[], build_directory=str(args.build_dir), verbose=False, with_cuda=True,
            with_sycl=False)
    except RuntimeError as exc:
        print(json.dumps({"ok": False, "error": str(exc)}))
        return
    print(json.dumps({"ok": True, "error": ""}))


if __name__ == "__main__":
    main()
