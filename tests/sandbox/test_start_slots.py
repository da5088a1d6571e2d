"""Host-wide start slots (sandbox/execution/start_slots.py): a cap on spares starting at once, across processes."""

from __future__ import annotations

import subprocess
import sys
import threading
from pathlib import Path

import pytest

from sandbox.execution.start_slots import HostStartSlots, SlotWaitAborted, default_count

# Another process holding slot 0 the way the module does (an flock on <dir>/slot-0.lock) until its stdin closes.
HOLDER = """
import fcntl, os, sys
fd = os.open(os.path.join(sys.argv[1], "slot-0.lock"), os.O_RDWR | os.O_CREAT, 0o600)
fcntl.flock(fd, fcntl.LOCK_EX)
print("held", flush=True)
sys.stdin.read()
"""


def test_a_second_holder_waits_for_the_first(tmp_path: Path) -> None:
    slots = HostStartSlots(tmp_path, 1)
    order: list[str] = []
    first_in, release, second_in = threading.Event(), threading.Event(), threading.Event()

    def first() -> None:
        with slots.hold():
            order.append("first in")
            first_in.set()
            release.wait(30)
            order.append("first out")

    def second() -> None:
        with slots.hold() as waited:
            order.append("second in")
            assert waited > 0
            second_in.set()

    a = threading.Thread(target=first)
    a.start()
    assert first_in.wait(10)
    b = threading.Thread(target=second)
    b.start()
    assert not second_in.wait(0.3), "two holders of a single slot at once"
    release.set()
    assert second_in.wait(10)
    a.join(10)
    b.join(10)
    assert order == ["first in", "first out", "second in"]


def test_two_slots_admit_two_at_once(tmp_path: Path) -> None:
    slots = HostStartSlots(tmp_path, 2)
    with slots.hold() as first, slots.hold() as second:
        assert first < 0.5 and second < 0.5  # neither waited for the other


def test_another_process_holds_a_slot_until_it_ends(tmp_path: Path) -> None:
    """The cap is the host's: a slot taken by another process is not free here, and its death frees it."""
    holder = subprocess.Popen([sys.executable, "-c", HOLDER, str(tmp_path)], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        slots = HostStartSlots(tmp_path, 1)
        got = threading.Event()

        def take() -> None:
            with slots.hold():
                got.set()

        taker = threading.Thread(target=take)
        taker.start()
        assert not got.wait(0.3), "a slot held by another process was taken"
        holder.kill()  # killed, not released: the kernel drops its lock
        assert got.wait(10)
        taker.join(10)
    finally:
        holder.kill()
        holder.wait(10)


def test_a_waiter_stops_when_its_pool_closes(tmp_path: Path) -> None:
    slots = HostStartSlots(tmp_path, 1)
    closing = threading.Event()
    outcome: list[str] = []

    def wait() -> None:
        try:
            with slots.hold(abort=closing.is_set):
                outcome.append("held")
        except SlotWaitAborted:
            outcome.append("aborted")

    with slots.hold():
        waiter = threading.Thread(target=wait)
        waiter.start()
        closing.set()
        slots.wake()
        waiter.join(10)
    assert outcome == ["aborted"]


@pytest.mark.parametrize(("cpus", "slots"), [(1, 1), (2, 1), (16, 8), (32, 16)])
def test_the_default_is_half_the_cpus(cpus: int, slots: int) -> None:
    assert default_count(cpus) == slots
