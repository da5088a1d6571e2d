"""How a `WarmPool` schedules its spares (sandbox/execution/warm.py), with real bubblewrap children on the CPU run
under the GPU's scheduling (`between_candidates=False`): a cap on starts at once, standby children set up as ready
ones are taken, tasks in turn served from stock, and still one candidate per child.

What happened when is read from the pool's own record (`WarmPool.timeline`, each child's timestamps), never
inferred from sleeps.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from sandbox import JudgeConfig, PreparedCandidate, Status, Verdict, execute, prepare
from sandbox.execution.device_gate import DeviceGate
from sandbox.execution.phases import EMPTY_CALLS
from sandbox.execution.start_slots import HostStartSlots
from sandbox.execution.warm import Interval, WarmChild, WarmPool

CORPUS = Path(__file__).resolve().parents[1] / "corpus" / "cpu"
START_S = 240.0
"""A spare's start on the loaded 2-core machine: 10-20 s seen with a dozen other processes busy; wide margin."""
SPARES, STANDBY = 2, 1


@pytest.fixture(scope="module")
def config(judge_root: Path) -> JudgeConfig:
    """The shared caches; few timed calls and no extra shapes (what is compared here is the verdict)."""
    return JudgeConfig(build_root=judge_root / "builds", cache_root=judge_root / "cache", memory_limit_bytes=3 << 30,
                       call_timeout_s=20.0, timing_budget_ms=50.0, trials_per_distribution=1, min_reps=5,
                       max_reps=5, check_extra_shapes=False)


@pytest.fixture(scope="module")
def pool(config: JudgeConfig, tmp_path_factory: pytest.TempPathFactory):
    """Two ready spares and one in standby; one start slot of its own (no other test's pool shares it)."""
    slots = HostStartSlots(tmp_path_factory.mktemp("slots"), 1)
    with WarmPool(["cpu"], config, spares=SPARES, standby=STANDBY, task_id="kl_div", between_candidates=False,
                  start_slots=slots) as warm:
        yield warm


def _full(pool: WarmPool, count: int = SPARES + STANDBY) -> None:
    """Wait (on the pool's own condition) until its stock is full and nothing is starting."""
    assert pool.wait_until(lambda s: s["cpu"]["ready"] + s["cpu"]["standby"] >= count and not s["cpu"]["starting"],
                           count * START_S), pool.stats()


def _prepare(source: str, config: JudgeConfig, task: str = "kl_div") -> PreparedCandidate:
    prepared = prepare(task, source, target="cpu", config=config)
    assert not isinstance(prepared, Verdict), prepared.diagnosis
    return prepared


def _disjoint(intervals: list[Interval]) -> bool:
    ordered = sorted(intervals, key=lambda i: i.begin)
    return all(later.begin >= earlier.end for earlier, later in zip(ordered, ordered[1:]))


def test_with_one_start_slot_no_two_spares_start_at_once(pool: WarmPool) -> None:
    _full(pool)
    spawns = [i for i in pool.timeline() if i.kind == "spawn"]
    set_ups = [i for i in pool.timeline() if i.kind == "set_up"]
    assert len(spawns) >= SPARES + STANDBY and len(set_ups) >= SPARES
    assert _disjoint(spawns), spawns  # the slot is held from spawn to Started
    assert _disjoint(set_ups), set_ups  # one set-up at a time per device
    # Each ready spare was spawned, then set up: its set-up began after its own Started.
    for child in pool.ready_children("cpu"):
        assert child.spawned + child.host_s <= child.began_at < child.ready_at


def test_a_taken_spare_is_replaced_from_standby_then_standby_is_refilled(pool: WarmPool) -> None:
    _full(pool)
    (waiting,) = pool.standby_children("cpu")
    before = pool.stats()["cpu"]
    child = pool.acquire("cpu", "kl_div")
    assert child is not None and child.acquire_wait_s < 1  # ready when asked
    taken_at = time.monotonic()
    try:
        # The standby child is set up as the replacement (no new start on the way), then a spawn refills standby.
        assert pool.wait_until(lambda s: s["cpu"]["started"] == before["started"] + 1, START_S), pool.stats()
        assert any(c.session is waiting.session for c in pool.ready_children("cpu"))
        _full(pool)
        after = pool.stats()["cpu"]
        assert (after["spawned"], after["served"]) == (before["spawned"] + 1, before["served"] + 1)
        newest = max((i for i in pool.timeline() if i.kind == "spawn"), key=lambda i: i.begin)
        assert newest.begin >= taken_at - 1  # the refill began when the spare was taken, not before
    finally:
        child.discard()


def test_tasks_in_turn_are_served_from_stock_and_a_full_stock_retires_the_oldest(pool: WarmPool,
                                                                                  config: JudgeConfig) -> None:
    _full(pool)
    kl_before = {c.session for c in pool.ready_children("cpu") if c.task_id == "kl_div"}
    assert len(kl_before) == SPARES
    retired = pool.stats()["cpu"]["retired"]
    # Full of kl_div: the first cross_entropy ask retires one kl_div spare (the oldest), not both.
    ce = pool.acquire("cpu", "cross_entropy")
    assert ce is not None and ce.task_id == "cross_entropy"
    assert pool.stats()["cpu"]["retired"] == retired + 1
    kept = [c for c in pool.ready_children("cpu") if c.task_id == "kl_div"]
    assert len(kept) == 1 and kept[0].session in kl_before and kept[0].alive()
    # kl_div again: served by the spare kept, ready when asked.
    kl = pool.acquire("cpu", "kl_div")
    assert kl is not None and kl.session is kept[0].session and kl.acquire_wait_s < 1
    assert pool.stats()["cpu"]["retired"] == retired + 1
    # Each judges its one candidate, then is gone (one candidate per child).
    for child, task, name in ((ce, "cross_entropy", "cross_entropy_cpp_correct.py"),
                              (kl, "kl_div", "kl_div_cpp_correct.py")):
        verdict = execute(_prepare((CORPUS / name).read_text(), config, task), "cpu", config=config, child=child)
        assert verdict.status is Status.CORRECT, verdict.diagnosis
        assert verdict.details["cost"]["pre_started"] is not None
        assert not child.alive() and not child.work_dir.exists()
    assert ce.session is not kl.session and ce.work_dir != kl.work_dir


def test_a_timed_phase_waiting_goes_before_the_next_set_up() -> None:
    """Set-ups one after another cannot keep a candidate from its timing: one waiting is let in first."""
    gate = DeviceGate()
    order: list[str] = []
    lock = threading.Lock()
    first_in, release_first, timed_in, release_timed = (threading.Event() for _ in range(4))

    def note(what: str) -> None:
        with lock:
            order.append(what)

    def set_up(name: str, inside: threading.Event | None, release: threading.Event | None) -> None:
        with gate.warming():
            note(name)
            if inside is not None and release is not None:
                inside.set()
                release.wait(30)

    def timed() -> None:
        with gate.phase("timing", {}):
            note("timing")
            timed_in.set()
            release_timed.wait(30)

    first = threading.Thread(target=set_up, args=("set-up 1", first_in, release_first))
    first.start()
    assert first_in.wait(10)
    timer = threading.Thread(target=timed)
    timer.start()
    deadline = time.monotonic() + 10
    while not gate.waiting:
        assert time.monotonic() < deadline
        time.sleep(0.01)  # polling a real condition, with a deadline
    second = threading.Thread(target=set_up, args=("set-up 2", None, None))
    second.start()
    release_first.set()
    assert timed_in.wait(10)
    release_timed.set()
    for thread in (first, timer, second):
        thread.join(10)
    assert order == ["set-up 1", "timing", "set-up 2"]


def test_a_timed_phase_waits_for_one_step_of_a_set_up_which_resumes_after_it(config: JudgeConfig,
                                                                             tmp_path_factory: pytest.TempPathFactory,
                                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    """A spare's set-up passes the gate per request to its child (start of the device, the clocks' calibration, each
    empty batch, the environment): a candidate's timed phase that asks during the calibration goes in once the batch
    running ends, no step runs beside it, and the set-up then finishes with every empty batch measured."""
    slots = HostStartSlots(tmp_path_factory.mktemp("slots"), 1)
    with WarmPool(["cpu"], config, spares=1, between_candidates=False, start_slots=slots) as pool:
        assert pool.wait_until(lambda s: s["cpu"]["standby"] == 1, START_S), pool.stats()  # no task yet: no set-up
        gate = pool.gate("cpu")
        assert gate is not None
        steps: list[tuple[int, bool]] = []  # the gate as each step began: (timed phases running, a step running)
        in_calibration, next_step = threading.Event(), threading.Event()
        original = gate.warming

        @contextlib.contextmanager
        def counted(abort=None, **kinds: bool) -> Iterator[None]:  # noqa: ANN001 - DeviceGate.warming's own argument
            with original(abort, **kinds):
                steps.append(gate.busy)
                if len(steps) == 3:  # the first empty batch (after the device's start and the clocks' calibration)
                    in_calibration.set()
                    deadline = time.monotonic() + 30
                    while not gate.waiting:  # the timed phase below has asked: this step ends with it waiting
                        assert time.monotonic() < deadline
                        time.sleep(0.01)  # polling a real condition, with a deadline
                elif len(steps) == 4:
                    next_step.set()
                yield

        monkeypatch.setattr(gate, "warming", counted)
        taken: list[WarmChild | None] = []
        asker = threading.Thread(target=lambda: taken.append(pool.acquire("cpu", "kl_div", timeout_s=START_S)))
        asker.start()  # names the task: the set-up begins
        assert in_calibration.wait(START_S), pool.stats()
        with gate.phase("timing", {}):
            entered_after = len(steps)
            assert not next_step.wait(0.3), "a step of the set-up ran beside a timed phase"
            during = len(steps)
        asker.join(START_S)
        (child,) = taken
        assert child is not None
        try:
            assert entered_after == 3 and during == 3, steps  # in between two steps of the calibration, not after it
            assert len(steps) == 1 + 1 + EMPTY_CALLS + 1, steps  # it resumed: every step ran, one at a time
            assert all(step == (0, True) for step in steps), steps  # none beside a timed phase
            assert len(child.calibration.empty_calls) == EMPTY_CALLS
            assert child.yielded_s >= 0.3 and child.cost()["yielded_s"] >= 0.3  # it gave the gate to the timed phase
            # The set-up's seconds add up, and its calibration's own excludes the wait for the timed phase.
            assert (child.device_s + child.calibration_s + child.environment_s
                    <= child.ready_at - child.began_at - child.yielded_s + 0.05)
            assert next_step.is_set()
        finally:
            child.discard()


def _wait_for(condition, what: str, timeout_s: float = 30.0) -> None:  # noqa: ANN001 - a predicate
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, what
        time.sleep(0.01)  # polling a real condition, with a deadline


def test_a_calibrating_step_waits_for_a_gap_and_an_untimed_stage_waits_for_it() -> None:
    """The calibration's figures feed the bounds: its steps run only with no candidate's stage on the device, a stage
    that asks meanwhile waits for the one step running, and one waiting goes before the next calibrating step."""
    gate = DeviceGate()
    order: list[str] = []
    lock = threading.Lock()

    def note(what: str) -> None:
        with lock:
            order.append(what)

    stepped, release_step = threading.Event(), threading.Event()

    def calibrating(name: str, hold: bool = False) -> None:
        with gate.warming(calibrating=True):
            note(name)
            stepped.set()
            if hold:
                release_step.wait(30)

    # A step asked during correctness waits for its end (an untimed stage, which other steps may run beside).
    with gate.phase("correctness", {}):
        first = threading.Thread(target=calibrating, args=("step 1",))
        first.start()
        _wait_for(lambda: gate.steps_waiting == 1, "the step never asked")
        note("correctness")
    first.join(10)
    assert order == ["correctness", "step 1"]

    # A stage that asks while a calibrating step runs waits for that step, and goes before the next one.
    stepped.clear()
    held = threading.Thread(target=calibrating, args=("step 2", True))
    held.start()
    assert stepped.wait(10)
    stages: dict[str, float] = {}

    def extra_shapes() -> None:
        with gate.phase("extra_shapes", stages):
            note("extra shapes")

    stage = threading.Thread(target=extra_shapes)
    stage.start()
    _wait_for(lambda: gate.stages == 0 and "extra shapes" not in order and gate.busy == (0, True),
              "the step ended early")
    following = threading.Thread(target=calibrating, args=("step 3",))
    following.start()
    _wait_for(lambda: gate.steps_waiting == 1, "the next step never asked")
    release_step.set()
    for thread in (held, stage, following):
        thread.join(10)
    assert order == ["correctness", "step 1", "step 2", "extra shapes", "step 3"]
    assert stages["device_gate_wait"] > 0


def test_no_calibrating_step_of_a_spare_runs_while_a_candidate_is_in_its_correctness_stage(
        config: JudgeConfig, tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    """A spare set up while the candidate before it is in its correctness trials: the child's start of the device may
    run beside them, but the clocks' calibration and the empty batches wait until that stage ends, and then every one
    runs with no stage on the device."""
    slots = HostStartSlots(tmp_path_factory.mktemp("slots"), 1)
    with WarmPool(["cpu"], config, spares=1, between_candidates=False, start_slots=slots) as pool:
        assert pool.wait_until(lambda s: s["cpu"]["standby"] == 1, START_S), pool.stats()  # no task yet: no set-up
        gate = pool.gate("cpu")
        assert gate is not None
        in_correctness = threading.Event()
        asked: list[int] = []  # the steps asked for, in order (1: the device's start, 2: the clocks' calibration, ...)
        ran: list[tuple[int, bool, int]] = []  # per step run: its number, the candidate in correctness, stages running
        original = gate.warming

        @contextlib.contextmanager
        def counted(abort=None, **kinds: bool) -> Iterator[None]:  # noqa: ANN001 - DeviceGate.warming's own argument
            asked.append(len(asked) + 1)
            number = len(asked)
            with original(abort, **kinds):
                ran.append((number, in_correctness.is_set(), gate.stages))
                yield

        monkeypatch.setattr(gate, "warming", counted)
        taken: list[WarmChild | None] = []
        with gate.phase("correctness", {}):
            in_correctness.set()
            asker = threading.Thread(target=lambda: taken.append(pool.acquire("cpu", "kl_div", timeout_s=START_S)))
            asker.start()  # names the task: the set-up begins beside the correctness stage
            _wait_for(lambda: len(asked) >= 2, "the calibration never asked for the gate", START_S)
            _wait_for(lambda: len(ran) >= 2 or gate.steps_waiting == 1, "the calibration neither ran nor waited")
            during = list(ran)
            in_correctness.clear()
        asker.join(START_S)
        (child,) = taken
        assert child is not None
        try:
            assert [number for number, _, _ in during] == [1], during  # the device's start only, beside the stage
            calibration = [r for r in ran if 2 <= r[0] <= 2 + EMPTY_CALLS]  # the clocks, then each empty batch
            assert len(calibration) == 1 + EMPTY_CALLS, ran
            assert all(not beside and stages == 0 for _, beside, stages in calibration), ran
            assert len(child.calibration.empty_calls) == EMPTY_CALLS
        finally:
            child.discard()
