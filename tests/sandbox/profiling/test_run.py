"""The profiled child for real on the CPU: a real build, the real sandbox, the entry module loading the candidate.

There is no GPU and no ncu here, so ncu is played by a stand-in written below: it runs the target it wraps
(the entry module, inside the same bubblewrap sandbox, exactly as ncu would) and, when that target succeeded,
writes a recorded ncu log (tests/fixtures/ncu) to the `--log-file` it was given. Everything around it is the
judge's: the argv, the binds, the limits, reading the log back without following links, the outcome.
"""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

import pytest

from sandbox.pipeline import PreparedCandidate, prepare
from sandbox.profiling.run import BASE_S, CALLS, TIME_LIMIT_S, _read_log, profile_candidate, time_limit_s
from sandbox.verdict import Performance, Status, TimingStats, TrialResult, Verdict

CORPUS = Path(__file__).resolve().parents[2] / "corpus"
FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "ncu"

STANDIN = f"""#!{sys.executable}
import os, subprocess, sys
args = sys.argv[1:]
if args == ["--version"]:
    print("NVIDIA (R) Nsight Compute Command Line Profiler\\nVersion 2025.3.1.0 (build 36398880) (public-release)")
    sys.exit(0)
split = args.index("--")
options, target = args[:split], args[split + 1:]
log = options[options.index("--log-file") + 1]
code = subprocess.call(target)
here = os.path.dirname(os.path.abspath(__file__))
with open(log, "w") as fh:
    if code == 0:
        fh.write(open(os.path.join(here, "recorded.csv")).read())
    else:
        fh.write("==PROF== Disconnected from process 7\\n==ERROR== The application returned an error code (1).\\n")
sys.exit(code)
"""


@pytest.fixture
def standin_ncu(tmp_path: Path) -> str:
    where = tmp_path / "ncu-standin"
    where.mkdir()
    shutil.copy(FIXTURES / "kl_div_fast_h100.csv", where / "recorded.csv")
    path = where / "ncu"
    path.write_text(STANDIN)
    path.chmod(0o755)
    return str(path)


def _prepared(task: str, name: str, judge_config) -> PreparedCandidate:
    prepared = prepare(task, (CORPUS / "cpu" / name).read_text(), target="cpu", config=judge_config)
    assert isinstance(prepared, PreparedCandidate), prepared
    return prepared


def test_built_candidate_is_profiled_in_its_sandbox(judge_config, standin_ncu):
    prepared = _prepared("kl_div", "kl_div_cpp_correct.py", judge_config)
    profile = profile_candidate(prepared, "cpu", config=judge_config, ncu=standin_ncu, calls=2)
    assert profile.status == "ok", profile.reason
    assert profile.ncu_version == "2025.3.1.0" and profile.calls == 2
    assert [k.name.split("(")[0] for k in profile.kernels] == ["<unnamed>::kl_fast_kernel"]
    assert profile.launches == 3
    assert not [p for p in os.listdir(prepared.build_dir) if p.startswith("ncu-profile-")]  # the log is removed


def test_candidate_failing_under_the_profiler_gives_a_failed_profile_with_its_error(judge_config, standin_ncu):
    prepared = _prepared("cross_entropy", "exception.py", judge_config)
    profile = profile_candidate(prepared, "cpu", config=judge_config, ncu=standin_ncu)
    assert profile.status == "failed"
    assert "ValueError: unsupported number of classes" in profile.reason
    assert profile.kernels == []


def test_cpu_host_without_a_profiler_says_not_available(judge_config):
    prepared = _prepared("kl_div", "kl_div_cpp_correct.py", judge_config)
    profile = profile_candidate(prepared, "cpu", config=judge_config)
    assert profile.status == "unavailable"
    assert profile.reason.startswith("not available on this host")


def test_log_is_read_only_as_a_regular_file_not_through_a_link(tmp_path: Path):
    secret = tmp_path / "secret"
    secret.write_text("host secret")
    build = tmp_path / "build"
    build.mkdir()
    (build / "linked.csv").symlink_to(secret)
    os.mkfifo(build / "fifo.csv")
    (build / "real.csv").write_text("==PROF== ok\n")
    assert _read_log(build, "linked.csv") is None
    assert _read_log(build, "fifo.csv") is None  # would block a reader forever
    assert _read_log(build, "missing.csv") is None
    assert _read_log(build, "real.csv") == "==PROF== ok\n"


def _verdict(*, median_ms: float | None = None, correctness_s: float | None = None, trials: int = 0) -> Verdict:
    timing = None if median_ms is None else Performance(candidate=TimingStats(
        median_ms=median_ms, q25_ms=median_ms, q75_ms=median_ms * 1.1, min_ms=median_ms, mean_ms=median_ms, reps=30),
        min_bytes=1)
    return Verdict(status=Status.CORRECT if timing else Status.INCORRECT, task="kl_div", device="cuda:0",
                   source_sha256="0" * 64, diagnosis="", performance=timing,
                   stages={"correctness": correctness_s} if correctness_s is not None else {},
                   trials=[TrialResult(trial=i, distribution="official", seed=i, shape=[4, 4], passed=True)
                           for i in range(trials)])


def test_the_profile_s_wall_limit_follows_the_candidate_s_measured_call() -> None:
    """The device is held while a profile runs: a candidate slow only under the profiler holds it about its own
    time, not the four minutes a profile with nothing known gets."""
    fast = time_limit_s(_verdict(median_ms=1.0, correctness_s=2.1, trials=7))
    assert BASE_S < fast < BASE_S + 25  # a 1 ms kernel: the start, the import and a few seconds of replays
    slow = time_limit_s(_verdict(median_ms=200.0))
    assert fast < slow <= TIME_LIMIT_S
    assert time_limit_s(_verdict(correctness_s=1.4, trials=7)) == pytest.approx(BASE_S + 50 * (CALLS + 1) * 0.2)
    assert time_limit_s(_verdict(median_ms=10_000.0)) == TIME_LIMIT_S  # never more than the cap
    assert time_limit_s(_verdict()) == TIME_LIMIT_S and time_limit_s(None) == TIME_LIMIT_S  # nothing measured
