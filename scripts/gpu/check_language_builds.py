"""Compile the CuTe DSL and TileLang corpus kernels for a GPU architecture, with or without a GPU, and time it.

    python scripts/gpu/check_language_builds.py --out results/ [--arch sm_90a] [--device cpu|cuda]

For each corpus file in those languages (tests/corpus/cuda/*_cute.py, *_tilelang.py and the hostile ones) it
imports the module in this (trusted, checking) process and calls ModelNew once on the task's CPU-size inputs on
`--device`, counting the compiles the languages report (`cute.compile` calls, new entries in TileLang's cache)
and their seconds. On the CPU the call compiles and then fails to launch (no GPU): the compile is what is
measured, which shows what the build stage could do without a device. On a GPU the call also runs. Writes
`language_builds.md` under --out. Needs the [languages] extra (scripts/gpu/device_env.sh installs it there).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import re
import sys
import tempfile
import time
from pathlib import Path

import torch

from reference import get_task

ROOT = Path(__file__).resolve().parents[2]
CORPUS = [ROOT / "tests/corpus/cuda", ROOT / "tests/corpus/hostile/cuda"]
_HEADER = re.compile(r"^(expect|task):\s*(.+?)\s*$", re.M)


def _files() -> list[Path]:
    return sorted(p for d in CORPUS for p in d.glob("*.py") if re.search(r"(cute|tilelang)", p.stem))


def _compiles(language: str, cache: Path) -> int:
    """How many kernels the language has compiled so far in this process (TileLang: cache entries on disk)."""
    if language == "cute":
        return _COUNT["cute"]
    return sum(1 for _ in cache.rglob("*.so")) + sum(1 for _ in cache.rglob("*.cubin"))


_COUNT = {"cute": 0}


def _count_cute_compiles() -> None:
    import cutlass.cute as cute

    real = cute.compile

    def counted(*args, **kwargs):  # noqa: ANN002, ANN003, ANN202 - cute.compile's own signature
        result = real(*args, **kwargs)
        _COUNT["cute"] += 1
        return result

    cute.compile = counted


def check(path: Path, device: str, cache: Path) -> dict:
    meta = dict(_HEADER.findall(path.read_text()[:3000]))
    language = "cute" if "cute" in path.stem else "tilelang"
    task = get_task(meta["task"])
    inputs = task.make_inputs(task.cpu_shape, "official", 0, torch.device(device))
    before = _compiles(language, cache)
    started = time.monotonic()
    spec = importlib.util.spec_from_file_location(f"candidate_{path.stem}", path)
    module = importlib.util.module_from_spec(spec)
    error = None
    try:
        spec.loader.exec_module(module)
        module.ModelNew().to(device)(*inputs)
    except Exception as exc:  # noqa: BLE001 - on the CPU the launch fails after the compile; reported
        error = f"{type(exc).__name__}: {str(exc).splitlines()[0][:200] if str(exc) else ''}"
    return {"file": path.name, "language": language, "task": meta["task"], "expect": meta.get("expect"),
            "compiled": _compiles(language, cache) - before, "seconds": round(time.monotonic() - started, 2),
            "error": error}


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", type=Path, default=ROOT / "results")
    parser.add_argument("--arch", default="sm_90a")
    parser.add_argument("--device", default="cpu")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    cache = Path(tempfile.mkdtemp(prefix="tilelang-cache-"))
    os.environ.update(CUTE_DSL_ARCH=args.arch, TILELANG_CACHE_DIR=str(cache),
                      TILELANG_DEFAULT_TARGET=json.dumps({"kind": "cuda", "arch": args.arch}))
    _count_cute_compiles()
    rows = []
    for path in _files():
        row = check(path, args.device, cache)
        print(json.dumps(row), flush=True)
        rows.append(row)
    lines = [f"Compiles for {args.arch} on {args.device} (torch {torch.__version__}, python {sys.version.split()[0]}):",
             "", "| file | language | task | expected verdict | kernels compiled | seconds | call ended with |",
             "|---|---|---|---|---|---|---|"]
    lines += [f"| {r['file']} | {r['language']} | {r['task']} | {r['expect']} | {r['compiled']} | {r['seconds']} | "
              f"{(r['error'] or 'returned').replace('|', '/')} |" for r in rows]
    (args.out / "language_builds.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0 if all(r["compiled"] > 0 for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
