"""Which candidates' `.cu` files build against the judge's slim torch headers, and how much faster.

For each candidate file (a module that calls `load_inline` with CUDA sources), the `.cu` is written as
`load_inline` writes it and compiled with nvcc and torch's own flags, twice where asked: against the slim
headers (sandbox/child/build/slim_headers.py, pointed at through NVCC_APPEND_FLAGS as the build child does) and against
torch's full headers. It prints, per candidate, whether each compiled and how long it took, and a summary:
the share that builds slim, and the wall time of both. It needs no GPU (nvcc and torch's headers suffice)
and never runs candidate code: the sources are read from the file's syntax tree.

    python scripts/experiments/slim_header_coverage.py tests/corpus/cuda --full            # both builds of each
    python scripts/experiments/slim_header_coverage.py DIR -j 2 --full-on-failure --json out.json
    python scripts/experiments/slim_header_coverage.py tests/corpus/cuda/kl_div_fast.py --ptx   # device code equal?
    python scripts/experiments/slim_header_coverage.py DIR --torch-include /tmp/torch-2.11/torch/include  # other torch

--full compiles every `.cu` both ways; --full-on-failure only where the slim build fails (to tell a candidate
that needs the full headers from one that does not compile at all); --ptx also compiles both ways to PTX and
compares the device code (the same kernels must come out of both).
"""

from __future__ import annotations

import argparse
import ast
import inspect
import json
import os
import re
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path

from sandbox.child.build import hooks as build_hooks
from sandbox.child.build import slim_headers

IMPLICIT = ["#include <torch/types.h>", "#include <cuda.h>", "#include <cuda_runtime.h>"]
"""What load_inline puts before a candidate's CUDA sources (torch/utils/cpp_extension.py, load_inline)."""


@dataclass
class Extension:
    sources: list[str]
    extra_cuda_cflags: list[str]
    implicit_headers: bool


@dataclass
class Outcome:
    candidate: str
    skipped: str | None = None
    slim_ok: bool | None = None
    slim_s: float | None = None
    slim_error: str | None = None
    full_ok: bool | None = None
    full_s: float | None = None
    full_error: str | None = None
    ptx_equal: bool | None = None
    operators: list[str] = field(default_factory=list)


# --- reading a candidate ----------------------------------------------------------------------------------

def _strings(node: ast.AST, names: dict[str, ast.AST]) -> list[str] | None:
    """The string(s) an argument evaluates to, following module-level names; None when not literal."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return [node.value]
    if isinstance(node, ast.Name) and node.id in names:
        return _strings(names[node.id], names)
    if isinstance(node, (ast.List, ast.Tuple)):
        parts = [_strings(e, names) for e in node.elts]
        return None if any(p is None for p in parts) else [s for p in parts for s in p]
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        left, right = _strings(node.left, names), _strings(node.right, names)
        return None if left is None or right is None else ["".join(left) + "".join(right)]
    return None


def extensions(path: Path) -> list[Extension]:
    """Each load_inline call's CUDA sources, as literal text; calls whose sources are computed are left out."""
    tree = ast.parse(path.read_text())
    names: dict[str, ast.AST] = {}
    for node in tree.body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            names[node.targets[0].id] = node.value
    found = []
    for node in ast.walk(tree):
        name = getattr(node.func, "attr", getattr(node.func, "id", "")) if isinstance(node, ast.Call) else ""
        if name != "load_inline":
            continue
        kwargs = {kw.arg: kw.value for kw in node.keywords if kw.arg}
        cuda = kwargs.get("cuda_sources", node.args[2] if len(node.args) > 2 else None)
        sources = _strings(cuda, names) if cuda is not None else None
        if not sources:
            continue
        flags = _strings(kwargs["extra_cuda_cflags"], names) if "extra_cuda_cflags" in kwargs else []
        implicit = kwargs.get("no_implicit_headers")
        found.append(Extension(sources=sources, extra_cuda_cflags=flags or [],
                               implicit_headers=not (isinstance(implicit, ast.Constant) and implicit.value is True)))
    return found


# --- compiling --------------------------------------------------------------------------------------------

def nvcc_flags(extra: list[str], arch: str, torch_include: Path | None = None) -> list[str]:
    """nvcc's flags for a `.cu` exactly as this torch's load_inline writes them into build.ninja; with
    torch_include, another torch's header tree (its `include/`) in place of this one's."""
    import torch.utils.cpp_extension as ext

    if ext.CUDA_HOME is None:  # a CPU build of torch: point it at the nvcc on PATH
        ext.CUDA_HOME = str(Path(subprocess.check_output(["bash", "-c", "command -v nvcc"], text=True).strip())
                            .resolve().parent.parent)
    os.environ["TORCH_CUDA_ARCH_LIST"] = arch
    with tempfile.TemporaryDirectory() as tmp:
        ninja = os.path.join(tmp, "build.ninja")
        wanted = dict(path=ninja, name="coverage", sources=[os.path.join(tmp, "main.cpp"), os.path.join(tmp, "x.cu")],
                      extra_cflags=[], extra_cuda_cflags=extra, extra_sycl_cflags=[], extra_ldflags=[],
                      extra_include_paths=[], with_cuda=True, with_sycl=False, is_standalone=False)
        params = inspect.signature(ext._write_ninja_file_to_build_library).parameters
        ext._write_ninja_file_to_build_library(**{k: v for k, v in wanted.items() if k in params})
        text = Path(ninja).read_text()
    line = next(v for v in text.splitlines() if v.startswith("cuda_cflags = "))
    flags = shlex.split(line.split(" = ", 1)[1])
    if torch_include is not None:
        ours = [str(Path(p)) for p in ext.include_paths()]
        theirs = {ours[0]: str(torch_include), ours[1]: str(torch_include / "torch/csrc/api/include")}
        flags = [theirs.get(str(Path(f)), f) if not f.startswith("-") else f for f in flags]
    return flags


def stub_dir(work: Path, dirs: list[Path]) -> list[str]:
    """The CPU wheel of torch lacks one generated CUDA header: a stand-in, last on the path."""
    if any((d / "c10/cuda/impl/cuda_cmake_macros.h").exists() for d in dirs):
        return []
    stub = work / "stub" / "c10/cuda/impl"
    stub.mkdir(parents=True, exist_ok=True)
    (stub / "cuda_cmake_macros.h").write_text("#pragma once\n#define C10_CUDA_BUILD_SHARED_LIBS\n")
    return ["-isystem", str(work / "stub")]


def compile_cu(cu: Path, flags: list[str], slim_dir: Path | None, mode: str, out: Path) -> tuple[bool, float, str]:
    env = dict(os.environ)
    env.pop("NVCC_APPEND_FLAGS", None)
    if slim_dir is not None:
        env["NVCC_APPEND_FLAGS"] = f"-I{slim_dir}"
    argv = ["nvcc", *flags, mode, str(cu), "-o", str(out)]
    started = time.monotonic()
    done = subprocess.run(argv, capture_output=True, text=True, env=env)
    return done.returncode == 0, round(time.monotonic() - started, 1), done.stdout + done.stderr


def _ptx_body(path: Path) -> str:
    """PTX without its comments and file references: what the device runs."""
    lines = [ln for ln in path.read_text().splitlines() if not ln.lstrip().startswith(("//", ".file", ".loc"))]
    return re.sub(r"[ \t]+", " ", "\n".join(lines)).strip()


def judge_one(path: Path, args: argparse.Namespace) -> Outcome:
    outcome = Outcome(candidate=str(path))
    try:
        exts = extensions(path)
    except (SyntaxError, ValueError) as exc:
        outcome.skipped = f"not Python: {exc}"
        return outcome
    if not exts:
        outcome.skipped = "no load_inline call with literal CUDA sources"
        return outcome
    ext = exts[0]
    with tempfile.TemporaryDirectory(prefix="slim-cov-") as tmp:
        work = Path(tmp)
        cu = work / "cuda.cu"
        cu.write_text("\n".join((IMPLICIT if ext.implicit_headers else []) + ext.sources))
        flags = nvcc_flags(ext.extra_cuda_cflags, args.arch, args.torch_include)
        dirs = build_hooks.include_dirs(flags)  # as the build child reads them
        flags += stub_dir(work, dirs)
        reason = slim_headers.skip_reason(cu.read_text())
        slim = None if reason else slim_headers.write(work, [cu.read_text()], dirs)
        if slim is None:
            outcome.skipped = reason or "the slim header could not be made from this torch"
        else:
            outcome.operators = list(slim.operators)
            ok, seconds, log = compile_cu(cu, flags, slim.directory, "-c", work / "slim.o")
            outcome.slim_ok, outcome.slim_s = ok, seconds
            outcome.slim_error = None if ok else slim_headers.first_error(log)
        if args.full or (args.full_on_failure and not outcome.slim_ok):
            ok, seconds, log = compile_cu(cu, flags, None, "-c", work / "full.o")
            outcome.full_ok, outcome.full_s = ok, seconds
            outcome.full_error = None if ok else slim_headers.first_error(log)
        if args.ptx and outcome.slim_ok:
            ok_a, _, _ = compile_cu(cu, flags, slim.directory, "-ptx", work / "slim.ptx")
            ok_b, _, _ = compile_cu(cu, flags, None, "-ptx", work / "full.ptx")
            outcome.ptx_equal = ok_a and ok_b and _ptx_body(work / "slim.ptx") == _ptx_body(work / "full.ptx")
    return outcome


def candidates(paths: list[Path]) -> list[Path]:
    found: list[Path] = []
    for path in paths:
        found += sorted(path.rglob("*.py")) if path.is_dir() else [path]
    return found


def summary(outcomes: list[Outcome]) -> dict:
    tried = [o for o in outcomes if o.slim_ok is not None]
    slim_ok = [o for o in tried if o.slim_ok]
    full_known = [o for o in tried if not o.slim_ok and o.full_ok is not None]
    both = [o for o in outcomes if o.slim_ok and o.full_ok]
    return {
        "candidates": len(outcomes),
        "skipped": sum(o.skipped is not None and o.slim_ok is None for o in outcomes),
        "slim_tried": len(tried), "slim_ok": len(slim_ok),
        "slim_failed_full_ok": sum(bool(o.full_ok) for o in full_known),
        "slim_failed_full_failed": sum(o.full_ok is False for o in full_known),
        "slim_s_median": statistics.median([o.slim_s for o in slim_ok]) if slim_ok else None,
        "full_s_median": statistics.median([o.full_s for o in outcomes if o.full_ok]) if any(
            o.full_ok for o in outcomes) else None,
        "paired_speedup_median": statistics.median([o.full_s / o.slim_s for o in both]) if both else None,
        "ptx_equal": sum(o.ptx_equal is True for o in outcomes),
        "ptx_different": sum(o.ptx_equal is False for o in outcomes),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("paths", nargs="+", type=Path)
    parser.add_argument("-j", "--jobs", type=int, default=2)
    parser.add_argument("--arch", default="9.0")
    parser.add_argument("--full", action="store_true", help="also build every .cu with torch's full headers")
    parser.add_argument("--full-on-failure", action="store_true", help="... only where the slim build fails")
    parser.add_argument("--ptx", action="store_true", help="compare the device code of both builds")
    parser.add_argument("--torch-include", type=Path, help="another torch's include/ directory (its headers)")
    parser.add_argument("--limit", type=int, default=0, help="the first N candidates only")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args(argv)
    files = candidates(args.paths)[: args.limit or None]
    started = time.monotonic()
    with ThreadPoolExecutor(args.jobs) as pool:
        outcomes = []
        for outcome in pool.map(lambda p: judge_one(p, args), files):
            outcomes.append(outcome)
            status = ("skipped: " + outcome.skipped) if outcome.slim_ok is None else (
                f"slim {'ok' if outcome.slim_ok else 'FAILED'} {outcome.slim_s} s"
                + (f" ({outcome.slim_error})" if outcome.slim_error else ""))
            if outcome.full_ok is not None:
                status += f"; full {'ok' if outcome.full_ok else 'FAILED'} {outcome.full_s} s"
            if outcome.ptx_equal is not None:
                status += f"; device code {'equal' if outcome.ptx_equal else 'DIFFERENT'}"
            print(f"{Path(outcome.candidate).name}: {status}", flush=True)
    result = summary(outcomes)
    result["wall_s"] = round(time.monotonic() - started, 1)
    print(json.dumps(result, indent=1))
    if args.json:
        args.json.write_text(json.dumps({"summary": result, "outcomes": [asdict(o) for o in outcomes]}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
