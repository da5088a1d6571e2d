"""ncu's raw CSV page read into per-kernel rows, from recorded logs (tests/fixtures/ncu), and rendered for a prompt."""

from __future__ import annotations

from pathlib import Path

import pytest

from sandbox.profiling import ncu
from sandbox.profiling.render import PROMPT_CHARS, render_text
from sandbox.profiling.report import (KernelProfile, Profile, ProfileParseError, Stall, dim3, number,
                                      parse_raw_csv)

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "ncu"


def _log(name: str) -> str:
    return (FIXTURES / name).read_text()


def test_kl_div_launches_merge_into_one_kernel_with_medians():
    # Recorded on an H100 by scripts/gpu/profile_capture.py (tests/corpus/cuda/kl_div_fast.py, official inputs).
    report = parse_raw_csv(_log("kl_div_fast_h100.csv"))
    assert report.launches == 3
    (kernel,) = report.kernels
    assert kernel.name.startswith("<unnamed>::kl_fast_kernel(const float *, const float *, long")  # commas inside
    assert kernel.launches == 3
    assert kernel.duration_ns == 695040  # the median of 696,832 / 694,592 / 695,040 ns
    # one read of both 16384 x 16384 fp32 inputs, which is what a memory-bound kernel should move
    assert kernel.dram_bytes == pytest.approx(2 * 16384 * 16384 * 4, rel=2e-3)
    assert kernel.dram_bytes_per_s == pytest.approx(3.0927e12, rel=1e-4)
    assert kernel.dram_pct_of_peak == pytest.approx(92.26)
    assert kernel.sm_pct_of_peak == pytest.approx(52.03)
    assert kernel.achieved_occupancy_pct == pytest.approx(50.0)
    assert (kernel.registers_per_thread, kernel.shared_bytes_per_block) == (54, 257)
    assert (kernel.grid, kernel.block) == ((132, 1, 1), (1024, 1, 1))
    assert kernel.unavailable == []
    assert report.warnings == ["Note: Running with unmodified GPU clocks. If not controlled otherwise, profiling "
                               "results may be inconsistent."]


def test_stall_reasons_are_shares_of_all_samples_without_selected_or_not_issued():
    (kernel,) = parse_raw_csv(_log("kl_div_fast_h100.csv")).kernels
    assert [s.reason for s in kernel.stalls] == ["long_scoreboard", "wait", "not_selected"]
    # the longest launch (696,832 ns: long_scoreboard 54,888 samples; its *_not_issued duplicate, 27,704, left out)
    assert kernel.stalls[0].share_pct == pytest.approx(64.74, abs=0.01)
    assert sum(s.share_pct for s in kernel.stalls) < 100


def test_na_and_nan_are_unavailable_never_zero():
    report = parse_raw_csv(_log("edge_cases_handwritten.csv"))
    ce, fill = report.kernels
    assert ce.name.startswith("ce_fast_kernel(") and ce.launches == 2
    assert fill.name.startswith("void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>")
    assert fill.dram_bytes_per_s is None and fill.achieved_occupancy_pct is None and fill.stalls == []
    assert fill.unavailable == ["dram__bytes.sum.per_second", "sm__warps_active.avg.pct_of_peak_sustained_active",
                                "stalls"]
    assert fill.dram_bytes == 512 and fill.grid == (1, 1, 1)
    assert ce.unavailable == []
    assert report.warnings == ["Could not collect PC sampling data for 1 kernel(s): too few samples."]


def test_cross_entropy_recording_reads_whole():
    # Recorded on an H100 (tests/corpus/cuda/cross_entropy_fast.py): the 32768 x 4096 fp32 logits read once.
    (kernel,) = parse_raw_csv(_log("cross_entropy_fast_h100.csv")).kernels
    assert kernel.dram_bytes == pytest.approx(32768 * 4096 * 4, rel=5e-3)
    assert kernel.name.startswith("<unnamed>::ce_fast_kernel(") and kernel.launches == 3
    assert (kernel.registers_per_thread, kernel.grid, kernel.block) == (99, (528, 1, 1), (128, 1, 1))
    assert kernel.dram_pct_of_peak == pytest.approx(90.13) and kernel.unavailable == []
    assert text_has_every_figure(render_text(_ok([kernel])))


def text_has_every_figure(text: str) -> bool:
    return all(part in text for part in ("time 178.5 us", "DRAM 3.02 TB/s (90.1% of peak)", "SM 19.9%",
                                         "occupancy 24.6%", "regs/thread 99", "smem/block 65 B", "grid 528x1x1",
                                         "block 128x1x1", "top stalls: long_scoreboard 81%"))


def test_counters_reserved_for_administrators_is_recognised():
    report = parse_raw_csv(_log("counters_refused.csv"))
    assert report.counters_refused and report.kernels == [] and report.launches == 0
    assert report.errors[0].startswith("ERR_NVGPUCTRPERM")


@pytest.mark.parametrize("text", [
    '"ID","Process ID","Kernel Name","gpu__time_duration.sum"\n"0","1","k","5"\n',  # no units row
    '"ID","Process ID","Kernel Name","gpu__time_duration.sum"\n"","","","nsecond"\n"0","1","k"\n',  # short row
    '"ID","Process ID","Process Name","Section Name","Metric Name"\n"","","","",""\n',  # no Kernel Name
])
def test_text_that_is_not_the_raw_page_is_refused(text):
    with pytest.raises(ProfileParseError):
        parse_raw_csv(text)


def test_oversized_log_is_refused():
    with pytest.raises(ProfileParseError, match="over"):
        parse_raw_csv("x" * (5 << 20))


def test_units_are_normalised_to_base():
    assert number("1.5", "msecond") == 1.5e6
    assert number("2.5", "Tbyte/second") == 2.5e12
    assert number("1,024", "byte") == 1024
    assert number("n/a") is None and number("NaN", "%") is None and number("") is None and number("inf") is None
    assert dim3("(256, 1, 1)") == (256, 1, 1) and dim3("n/a") is None


def _ok(kernels: list[KernelProfile]) -> Profile:
    return Profile(status="ok", device="cuda:0", device_name="NVIDIA H100 80GB HBM3", ncu_version="2025.3.1.0",
                   calls=3, launches=3 * len(kernels), launch_limit=32, kernels=kernels)


def test_rendered_profile_names_every_figure_and_says_na():
    text = render_text(_ok(parse_raw_csv(_log("edge_cases_handwritten.csv")).kernels))
    assert "ncu 2025.3.1.0; NVIDIA H100 80GB HBM3" in text
    lines = text.splitlines()
    assert lines[1].startswith("1. ce_fast_kernel(")  # slowest first
    assert "time 189.7 us | DRAM 2.84 TB/s (85.0% of peak) | SM 38.6% | occupancy 71.8%" in text
    assert "regs/thread 56 | smem/block 128 B | grid 528x1x1 | block 256x1x1" in text
    assert "top stalls: long_scoreboard" in text
    assert "DRAM n/a (0.0% of peak)" in text and "occupancy n/a" in text and "top stalls: n/a" in text
    assert "n/a = ncu gave no value for: dram__bytes.sum.per_second" in text


def test_four_kernels_with_long_names_stay_under_the_prompt_size():
    kernel = KernelProfile(name="void at::native::reduce_kernel<512, 1, at::native::ReduceOp<float, " + "x" * 300,
                           duration_ns=1e5, stalls=[Stall(reason="long_scoreboard", share_pct=50.0)])
    profile = _ok([kernel.model_copy(update={"duration_ns": 1e5 * i}) for i in range(1, 7)])
    text = render_text(profile)
    assert len(text) < PROMPT_CHARS
    assert text.count("\n4. ") == 1 and "\n5. " not in text and "(+2 more kernel(s) not shown)" in text


def test_unavailable_and_failed_profiles_say_why():
    assert render_text(Profile(status="unavailable", reason="not available on this host: no GPU")) == (
        "Profile not available: not available on this host: no GPU")
    assert render_text(Profile(status="failed", reason="the profiled run failed")).startswith("Profile failed:")


def test_ncu_command_line_is_the_raw_csv_page_with_limits():
    argv = ncu.ncu_argv("/usr/local/cuda/bin/ncu", "/build/p.csv", ["python", "-m", "x"], launch_limit=7)
    assert argv[:6] == ["/usr/local/cuda/bin/ncu", "--csv", "--page", "raw", "--print-units", "base"]
    assert argv[argv.index("--launch-count") + 1] == "7"
    assert argv[argv.index("--log-file") + 1] == "/build/p.csv"
    assert argv[argv.index("--profile-from-start") + 1] == "off"
    metrics = argv[argv.index("--metrics") + 1].split(",")
    assert "gpu__time_duration.sum" in metrics and any(m.startswith("regex:^smsp__pcsamp") for m in metrics)
    assert argv[-4:] == ["--", "python", "-m", "x"]
