"""sandbox.warm_headers (sandbox/build/warm.py) reports each variant's fate; the building-then-ready path, with a
real g++, is tests/web/test_shared_headers.py (through `serve`)."""

from __future__ import annotations

import torch

from sandbox import WARM_FLAG_SETS, warm_headers


def test_a_variant_this_host_cannot_build_is_reported_failed_and_the_rest_go_on(tmp_path):
    if torch.cuda.is_available():  # the CUDA build's flags exist on a GPU host; this is the CPU hosts' case
        return
    seen = []
    built = warm_headers(tmp_path, "cuda", [("-O2",), ("-O3",)], on_progress=lambda *report: seen.append(report))
    assert built == [] and seen == [(("-O2",), "failed", None), (("-O3",), "failed", None)]
    assert not (tmp_path / "build-accel").exists() or not any((tmp_path / "build-accel").iterdir())


def test_the_usual_flag_sets_start_with_the_tours():
    assert WARM_FLAG_SETS[0] == ("-O2",) and () in WARM_FLAG_SETS
