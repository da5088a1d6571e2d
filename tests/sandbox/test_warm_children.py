"""Pre-started judge children (sandbox/execution/warm.py), for real: bubblewrap children on the CPU.

A warm child must judge exactly as a cold one, keep candidates apart, be replaced when it died or got old,
and keep its device set-up out of a candidate's timed phases.
"""

from __future__ import annotations

import threading
import time
import uuid
from pathlib import Path

import pytest

from sandbox import JudgeConfig, PreparedCandidate, Status, Verdict, execute, prepare
from sandbox.execution.warm import DeviceGate, WarmPool

CORPUS = Path(__file__).resolve().parents[1] / "corpus" / "cpu"
CORRECT = CORPUS / "kl_div_cpp_correct.py"
WRONG = CORPUS / "kl_div_wrong_direction.py"
START_S = 240.0
"""A spare's start on the loaded 2-core machine: ~13 s seen; wide margin."""


@pytest.fixture(scope="module")
def config(judge_root: Path) -> JudgeConfig:
    """The shared caches; few timed calls and no extra shapes (what is compared here is the verdict)."""
    return JudgeConfig(build_root=judge_root / "builds", cache_root=judge_root / "cache", memory_limit_bytes=3 << 30,
                       call_timeout_s=20.0, timing_budget_ms=50.0, trials_per_distribution=1, min_reps=5,
                       max_reps=5, check_extra_shapes=False)


@pytest.fixture(scope="module")
def pool(config: JudgeConfig):
    with WarmPool(["cpu"], config, task_id="kl_div") as warm:
        yield warm


def _prepare(source: str, config: JudgeConfig, task: str = "kl_div") -> PreparedCandidate:
    prepared = prepare(task, source, target="cpu", config=config)
    assert not isinstance(prepared, Verdict), prepared.diagnosis
    return prepared


def _wait_ready(pool: WarmPool, device: str = "cpu", count: int = 1) -> None:
    deadline = time.monotonic() + count * START_S
    while pool.stats()[device]["ready"] < count:
        assert time.monotonic() < deadline, f"no spare became ready: {pool.stats()}"
        time.sleep(0.1)  # polling a real condition, with a deadline


@pytest.mark.parametrize(("path", "expected"), [(CORRECT, Status.CORRECT), (WRONG, Status.INCORRECT)])
def test_a_warm_child_judges_as_a_cold_start_does(path: Path, expected: Status, pool: WarmPool,
                                                   config: JudgeConfig) -> None:
    prepared = _prepare(path.read_text(), config)
    cold = execute(prepared, "cpu", config=config)
    child = pool.acquire("cpu", "kl_div")
    assert child is not None and child.alive()
    work_dir = child.work_dir
    warm = execute(prepared, "cpu", config=config, child=child)

    assert cold.status is expected, cold.diagnosis
    assert warm.status is expected, warm.diagnosis
    # The same trials, each on its own fresh seed (which trials an incorrect candidate passes can depend on the
    # seed: kl_div_wrong_direction is close on some official draws).
    assert [t.distribution for t in warm.trials] == [t.distribution for t in cold.trials]
    # The start was paid before the hand-over, and the verdict says so; the cold start's is on its clock.
    assert warm.details["cost"]["pre_started"]["host_s"] > 0
    assert warm.stages["pre_start"] > 0 and warm.stages["start"] < 0.5 < cold.stages["start"]
    # Calibrated before the hand-over too: the warm run only adopts the spare's figures. (Compared with the spare's
    # own calibration, not a fixed 0.05 s: a fast host calibrates in 0.04-0.05 s, 2026-11-25.)
    assert 0 <= warm.stages["calibration"] < warm.stages["pre_calibration"] / 4
    assert cold.details["cost"]["pre_started"] is None
    assert warm.environment is not None and warm.environment.isolation == cold.environment.isolation
    # One candidate per child: it is gone, and so is its directory.
    assert not child.alive()
    assert not work_dir.exists()


def test_a_candidate_cannot_see_the_files_of_the_one_before(pool: WarmPool, config: JudgeConfig) -> None:
    """Each candidate leaves a file in its build directory and in /tmp, and fails if it finds another's.

    The spy is real: a candidate's build directory does carry the file its own import left while it was
    built (the first version of this test failed on exactly that), so it would see a predecessor's too."""
    spy = '''
import glob as _glob
import os as _os
_seen = [_p for _p in _glob.glob(_os.path.join(_os.getcwd(), "left-by-*")) + _glob.glob("/tmp/left-by-*")
         if not _p.endswith("NONCE")]  # its own, from the import that built it, travels with its build
if _seen:
    raise RuntimeError(f"saw a previous candidate's files: {_seen}")
for _where in (_os.getcwd(), "/tmp"):
    with open(_os.path.join(_where, "left-by-NONCE"), "w") as _fh:
        _fh.write("x")
'''
    correct = CORRECT.read_text()
    verdicts = []
    for _ in range(2):
        source = spy.replace("NONCE", uuid.uuid4().hex) + correct  # two sources, two builds
        child = pool.acquire("cpu", "kl_div")
        assert child is not None
        verdicts.append(execute(_prepare(source, config), "cpu", config=config, child=child))
    assert [v.status for v in verdicts] == [Status.CORRECT, Status.CORRECT], [v.diagnosis for v in verdicts]
    assert all(v.details["cost"]["pre_started"] for v in verdicts)


def test_a_child_ends_at_once_and_its_output_is_kept(pool: WarmPool, config: JudgeConfig) -> None:
    """The child leaves by os._exit (no interpreter finalisation, which cost ~1 s of device time per
    candidate): on its own, with exit code 0, and what the candidate printed still reaches the judge."""
    marker = f"said-{uuid.uuid4().hex}"
    source = f'print("{marker}", end="")\n' + CORRECT.read_text()
    child = pool.acquire("cpu", "kl_div")
    assert child is not None
    verdict = execute(_prepare(source, config), "cpu", config=config, child=child)
    assert verdict.status is Status.CORRECT, verdict.diagnosis
    assert child.session.process.returncode == 0  # it left on its own: not killed at the close's deadline
    assert marker in child.session.process.output_text()


def test_two_spares_are_kept_and_no_third(config: JudgeConfig) -> None:
    """One starter per spare: two spares ready, and the starters agree that no third is due (a start is
    counted from the decision to start, so two starters cannot both take the last place)."""
    with WarmPool(["cpu"], config, task_id="kl_div", spares=2) as pool:
        _wait_ready(pool, count=2)
        stats = pool.stats()["cpu"]
        assert (stats["ready"], stats["starting"], stats["started"]) == (2, 0, 2), stats
        first = pool.acquire("cpu", "kl_div")
        second = pool.acquire("cpu", "kl_div")
        assert first is not None and second is not None and first.session is not second.session
        assert first.acquire_wait_s < 1 and second.acquire_wait_s < 1  # both were ready: no wait
        for child in (first, second):
            child.discard()


def test_dead_old_and_wrong_task_spares_are_replaced_never_used(config: JudgeConfig) -> None:
    with WarmPool(["cpu"], config, task_id="kl_div", max_age_s=3600) as pool:
        _wait_ready(pool)
        (dead,) = pool.ready_children("cpu")
        dead.session.kill()
        dead.session.process.wait(timeout=30)
        child = pool.acquire("cpu", "kl_div")
        assert child is not None and child is not dead and child.alive()
        assert pool.stats()["cpu"]["dead"] == 1
        assert not dead.work_dir.exists()
        child.discard()

        _wait_ready(pool)
        (old,) = pool.ready_children("cpu")
        old.spawned -= 3601  # as if started an hour ago
        child = pool.acquire("cpu", "kl_div")
        assert child is not None and child is not old and not old.alive()
        assert pool.stats()["cpu"]["recycled"] == 1
        child.discard()

        _wait_ready(pool)
        (other,) = pool.ready_children("cpu")
        assert other.task_id == "kl_div"
        child = pool.acquire("cpu", "cross_entropy")
        assert child is not None and child.task_id == "cross_entropy" and not other.alive()
        assert pool.stats()["cpu"]["retired"] == 1
        verdict = execute(_prepare((CORPUS / "cross_entropy_cpp_correct.py").read_text(), config, "cross_entropy"),
                          "cpu", config=config, child=child)
        assert verdict.status is Status.CORRECT, verdict.diagnosis
        assert verdict.details["cost"]["pre_started"] is not None


def test_a_child_for_another_task_is_not_used(pool: WarmPool, config: JudgeConfig) -> None:
    child = pool.acquire("cpu", "kl_div")
    assert child is not None
    verdict = execute(_prepare((CORPUS / "cross_entropy_cpp_correct.py").read_text(), config, "cross_entropy"),
                      "cpu", config=config, child=child)
    assert verdict.status is Status.CORRECT, verdict.diagnosis
    assert verdict.details["cost"]["pre_started"] is None  # started cold
    assert not child.alive() and not child.work_dir.exists()


def test_the_gate_keeps_spare_set_up_and_timed_phases_apart() -> None:
    gate = DeviceGate()
    release, entered, stages = threading.Event(), threading.Event(), {}

    def warm() -> None:
        with gate.warming():
            release.wait(30)

    def timed() -> None:
        with gate.phase("timing", stages):
            entered.set()

    warmer = threading.Thread(target=warm)
    warmer.start()
    deadline = time.monotonic() + 10
    while gate.busy != (0, True):
        assert time.monotonic() < deadline
        time.sleep(0.01)
    with gate.phase("correctness", {}):  # untimed stages do not wait
        pass
    timer = threading.Thread(target=timed)
    timer.start()
    assert not entered.wait(0.3), "a timed phase ran beside a spare's set-up"
    release.set()
    assert entered.wait(10)
    timer.join(10)
    warmer.join(10)
    assert stages["device_gate_wait"] >= 0.3

    # And the other way round: a spare's set-up waits for the timed phase to end.
    inside, done = threading.Event(), threading.Event()

    def warm_again() -> None:
        with gate.warming():
            inside.set()
            done.wait(30)

    with gate.phase("timing", {}):
        warmer = threading.Thread(target=warm_again)
        warmer.start()
        assert not inside.wait(0.3), "a spare's set-up ran beside a timed phase"
    assert inside.wait(10)
    done.set()
    warmer.join(10)
