"""Building the shared precompiled headers (sandbox/build/accel.py) ahead of the first candidate, saying how far.

Why: a host's first C++ build would otherwise build the precompiled torch/extension.h of its flags itself,
minutes of g++ on a small machine (170 s on a loaded 2-core box, and again for each other flag set), while its
submitter sees nothing but "compiling". A service starts `warm` in the background when its worker starts, and
shows `on_progress`'s reports (/readyz, the CLI's wait line, the submission page). A candidate needing a variant
being built waits for it on the variant's lock and never builds it a second time; one needing a variant not yet
reached builds that one itself, as without warming.

Command line: ``python -m sandbox.build.warm --target cpu`` builds the usual variants now (a deployment step).
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from sandbox.build.accel import FLAGS_FILE, accel_root, build_variant, torch_compile_flags, variant_path
from sandbox.shared.accel_layout import has_full, usable
from sandbox.config import JudgeConfig

WARM_FLAG_SETS: tuple[tuple[str, ...], ...] = (("-O2",), (), ("-O3",))
"""The usual extra_cflags, in the order they are built: -O2 first (the worked examples' and the kernels of the
README's tour, tests/corpus/cpu), then none (most LLM kernels pass none), then -O3."""

WarmProgress = Callable[[tuple[str, ...], str, float | None], None]
"""`on_progress(extra_cflags, state, seconds)`: "building" (seconds None) as a variant's build begins, then
"ready" (the seconds it took; 0.0 when it was built already) or "failed" (None: no usable torch header or
compiler here, or the compiler failed; candidates then build without it)."""


def warm(cache_root: Path, target: str, flag_sets: Sequence[tuple[str, ...]] | None = None,
         on_progress: WarmProgress | None = None, wait_full: bool = False) -> list[Path]:
    """Build the variants of `flag_sets` (default `WARM_FLAG_SETS`) one after the other; the ones ready. A variant
    is ready once it is usable: its subset PCH (its full one is built on demand, sandbox/build/accel.py);
    `wait_full`: once its full PCH is in place too, built now."""
    report = on_progress or (lambda *_: None)
    root, ready = accel_root(cache_root), []
    for extra in WARM_FLAG_SETS if flag_sets is None else flag_sets:
        try:
            compiler, flags = torch_compile_flags(target, extra)
        except Exception:  # noqa: BLE001 - torch could not describe its build (no CUDA here, say): nothing to build
            report(extra, "failed", None)
            continue
        path = variant_path(root, compiler, flags)
        if path is not None and usable(path) and (has_full(path) or not wait_full):
            report(extra, "ready", 0.0)
            ready.append(path)
            continue
        report(extra, "building", None)
        started = time.monotonic()
        variant = build_variant(root, compiler, flags, wait_full=wait_full)
        if variant is None:
            report(extra, "failed", None)
            continue
        report(extra, "ready", round(time.monotonic() - started, 1))
        ready.append(variant)
    return ready


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m sandbox.build.warm",
                                     description="Build the precompiled torch/extension.h variants now.")
    parser.add_argument("--target", choices=["cpu", "cuda"], default="cuda")
    args = parser.parse_args(argv)
    for variant in warm(JudgeConfig().cache_root, args.target, wait_full=True):
        print(variant, json.loads((variant / FLAGS_FILE).read_text()).get("seconds"))


if __name__ == "__main__":
    main()
