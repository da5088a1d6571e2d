"""A worker's life apart from judging: stop signals, heartbeats, its `workers` row, build-cache maintenance, and
the shutdown that drains it (a mixin of service.worker.runner.Worker, which holds the state these read).

Shutdown (SIGTERM/SIGINT): stop claiming; jobs executing on a device are finished (up to `shutdown_grace_s`);
every other held job goes back to the queue (`release`), compiled ones included (their build is cached). A second
signal, or the end of the grace period, releases everything at once; a repeated notice of the parent's death is
not a second signal (`on_signal`). Signals are acted on in a thread of their own, never inside the handler, which
could interrupt the main thread while it holds a lock (`install_signal_handlers`).
"""

from __future__ import annotations

import logging
import os
import queue
import signal
import threading
import time

from service.profiles import recovery as profile_recovery
from service.queue import claims as q
from service.worker import lifeline, registry

log = logging.getLogger("service.worker")

STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)


def _noted(_signum: int, _frame: object) -> None:
    """The Python-level handler of the stop signals: nothing (Lifecycle.install_signal_handlers says why)."""


class Lifecycle:
    """Signals, heartbeats, the workers row, maintenance and shutdown of a Worker."""

    def install_signal_handlers(self) -> None:
        """SIGTERM and SIGINT are acted on by a thread of their own (`on_signal`), never in the handler.

        Python runs a handler in the main thread between two bytecodes, whatever that thread holds then, and the
        claim loop is mostly inside `self.wake.wait` or `clear`, which hold that Event's lock: a handler that set the
        Event waited for a lock its own thread held (the executor thread finished its job, the process never
        exited). The handler here does nothing; the interpreter's C handler writes the signal's number to a pipe
        (`signal.set_wakeup_fd`) and the `signals` thread reads it. Call from the main thread."""
        read, write = os.pipe()
        os.set_blocking(write, False)  # set_wakeup_fd's requirement: a full pipe drops a byte, never blocks
        signal.set_wakeup_fd(write, warn_on_full_buffer=False)
        for signum in STOP_SIGNALS:
            signal.signal(signum, _noted)
        threading.Thread(target=self._signals, args=(read,), name="signals", daemon=True).start()

    def _signals(self, read: int) -> None:
        while True:
            for signum in os.read(read, 64):
                if signum in STOP_SIGNALS:
                    self.on_signal(signum)

    def on_signal(self, signum: int, _frame: object = None) -> None:
        """First signal: stop gracefully. A second one abandons everything, unless it is one more notice of the
        parent's death: the kernel's PDEATHSIG can arrive more than once for one death (it fires on every
        reparenting, e.g. first to another thread of the dying `serve`), and a death is one reason to stop,
        not two. A signal that arrives while the expected parent is gone, or is gone moments later (`lifeline.dying`:
        the notices of one death can come before the last hand-over to init), counts as such a notice."""
        if not self.stopping.is_set():
            log.info("signal %d: finishing running jobs, releasing the rest", signum)
            self.stop()
        elif lifeline.dying(self.parent):
            log.info("signal %d: the parent's death again; already stopping gracefully", signum)
        else:
            self._abandon()

    def _abandon(self) -> None:
        log.warning("second signal: releasing every held job now")
        self._release_all()
        try:  # still a stop, not a death: the workers table must not list this worker as alive
            registry.stopped(self.db, self.worker_id, self._row_stats())
        except Exception:  # noqa: BLE001 - exiting anyway
            log.exception("could not mark this worker stopped in the workers table")
        os._exit(1)

    def publish(self) -> None:
        """Write this worker's row now: its current jobs and its stats (the watchdog's stalls included)."""
        with self.lock:
            current = [h.describe() for h in self.held.values()]
        try:
            registry.beat(self.db, self.worker_id, current, self._row_stats())
        except Exception:
            log.exception("the workers row was not refreshed")

    def _row_stats(self) -> dict[str, object]:
        return {**self.stats.snapshot(), **self.watchdog.snapshot(), **self.headers.snapshot()}

    def _heartbeats(self) -> None:
        interval = max(0.2, self.settings.lease_s / 4)
        while not self.stopped.wait(interval):
            with self.lock:
                tokens = list(self.held)
            try:
                lost = q.heartbeat(self.db, tokens, self.settings.lease_s)
            except Exception:
                log.exception("heartbeat failed")
                continue
            self.publish()
            with self.lock:
                for token in lost:
                    h = self.held.pop(token, None)
                    if h is not None:
                        log.warning("job %s: lease lost; its result will be discarded", h.claim.job_id)

    def _maintenance(self) -> None:
        """Keep the build cache under JUDGE_BUILD_CACHE_MAX_BYTES (every maintenance_interval_s)."""
        from service.maintenance import run_maintenance

        while not self.stopped.wait(self.settings.maintenance_interval_s):
            try:
                report = run_maintenance(self.settings, db=self.db)
                builds = report.get("builds", {})
                if builds.get("evicted") or report["artifacts"]["run_dirs_removed"]:
                    log.info("maintenance: evicted %d builds (%d bytes), removed %d run dirs",
                             len(builds.get("evicted", [])), builds.get("freed_bytes", 0),
                             len(report["artifacts"]["run_dirs_removed"]))
            except Exception:
                log.exception("maintenance failed")

    def _shutdown(self) -> None:
        """Let compile threads and executors drain (they release instead of starting new work), wait for
        running jobs until the grace period ends, then release whatever is still held."""
        self.stopping.set()
        deadline = time.monotonic() + self.settings.shutdown_grace_s
        while time.monotonic() < deadline:
            while True:  # compiled jobs nobody will execute now: back to the queue
                try:
                    claim, _ = self.compiled.get_nowait()
                except queue.Empty:
                    break
                if isinstance(claim, profile_recovery.Orphan):
                    self._give_back_profile(claim)
                else:
                    self._release(claim)
            with self.lock:
                if not self.held:
                    break
            self.wake.wait(0.1)
            self.wake.clear()
        self._release_all()
        self.judge.close()  # kills the pre-started children (and any a job still runs after the grace period)
        try:
            registry.stopped(self.db, self.worker_id, self._row_stats())
        except Exception:
            log.exception("could not mark this worker stopped in the workers table")
        self.stopped.set()
        log.info("worker %s: stopped after %d verdicts", self.worker_id, self.judged)
