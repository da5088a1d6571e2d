"""The worker: a claim loop feeding a compile pool, feeding one executor per device.

    claim loop ──> compile threads (sandbox.prepare, CPU, N at once) ──> compiled queue
                                                                           │
                       one executor thread per device (sandbox.execute) <──┘ ──> finish (verdict)
    heartbeat thread: extends the leases of every held job, notices jobs taken away.

The loop claims only what the pool can start now plus one compiled job waiting per device, so the
device never waits while compiled work exists, and a worker never hoards jobs another could run.
Candidate code never runs here: every sandbox call starts its own isolated child process.

Shutdown (SIGTERM/SIGINT): stop claiming; jobs executing on a device are finished (up to
`shutdown_grace_s`); every other held job goes back to the queue (`release`), compiled ones included
(their build is cached). A second signal, or the end of the grace period, releases everything at once.
"""

from __future__ import annotations

import logging
import os
import queue
import signal
import socket
import threading
import time
from dataclasses import dataclass

from sandbox import PreparedCandidate, Verdict
from service.core.config import Settings
from service.db.session import Database
from service.queue import claims as q
from service.queue.states import JobState
from service.worker.judging import Judge, crash_loop_verdict, system_error

log = logging.getLogger("service.worker")

FINISH_RETRIES = 6
"""Attempts to record a verdict while the database is unreachable (1, 2, 4, ... s apart); after that the
job is let go and reclaimed by the next worker once its lease expires."""


@dataclass
class _Held:
    claim: q.Claim
    phase: str = "compiling"


class Worker:
    def __init__(self, db: Database, settings: Settings, judge: Judge, devices: list[str],
                 worker_id: str | None = None) -> None:
        self.db = db
        self.settings = settings
        self.judge = judge
        self.devices = devices
        self.target = "cpu" if all(d == "cpu" for d in devices) else "cuda"
        self.worker_id = worker_id or f"{socket.gethostname()}:{os.getpid()}"
        self.policy = q.RetryPolicy(settings.max_attempts, settings.retry_backoff_s, settings.max_worker_crashes)
        self.compile_slots = max(1, settings.compile_workers)
        self.held: dict[str, _Held] = {}
        self.lock = threading.Lock()
        self.to_compile: queue.Queue[q.Claim] = queue.Queue()
        self.compiled: queue.Queue[tuple[q.Claim, PreparedCandidate]] = queue.Queue()
        self.compiling = 0
        self.stopping = threading.Event()
        self.wake = threading.Event()
        self.judged = 0

    # --- the loop ----------------------------------------------------------------------------------

    def run(self, *, max_jobs: int | None = None) -> None:
        """Claim and judge until stopped (signal, `stop()`, or after `max_jobs` verdicts)."""
        log.info("worker %s: judge=%s devices=%s compile_workers=%d lease=%.0fs", self.worker_id, self.judge.mode,
                 ",".join(self.devices), self.compile_slots, self.settings.lease_s)
        threads = [threading.Thread(target=self._heartbeats, name="heartbeat", daemon=True)]
        threads += [threading.Thread(target=self._compile_loop, name=f"compile-{i}", daemon=True)
                    for i in range(self.compile_slots)]
        threads += [threading.Thread(target=self._execute_loop, args=(d,), name=f"execute-{d}", daemon=True)
                    for d in self.devices]
        for t in threads:
            t.start()
        while not self.stopping.is_set():
            if max_jobs is not None and self.judged >= max_jobs:
                break
            want = self._capacity()
            try:
                claimed = q.claim(self.db, self.worker_id, want, self.settings.lease_s) if want else []
            except Exception:  # the database is unreachable: keep the held jobs, try again
                log.exception("claim failed")
                claimed = []
            for c in claimed:
                self._start(c)
            self.wake.wait(self.settings.poll_s if not claimed or not want else 0.05)
            self.wake.clear()
        self._shutdown()

    def stop(self) -> None:
        self.stopping.set()
        self.wake.set()

    def install_signal_handlers(self) -> None:
        def handle(signum: int, _frame: object) -> None:
            if self.stopping.is_set():
                log.warning("second signal: releasing every held job now")
                self._release_all()
                os._exit(1)
            log.info("signal %d: finishing running jobs, releasing the rest", signum)
            self.stop()

        signal.signal(signal.SIGTERM, handle)
        signal.signal(signal.SIGINT, handle)

    def _capacity(self) -> int:
        """Jobs to claim now: free compile slots, keeping at most one compiled job waiting per device."""
        with self.lock:
            compiling = self.compiling + self.to_compile.qsize()
            waiting = self.compiled.qsize()
        free = self.compile_slots - compiling
        room = self.compile_slots + len(self.devices) - compiling - waiting
        return max(0, min(free, room))

    def _start(self, claim: q.Claim) -> None:
        with self.lock:
            self.held[claim.token] = _Held(claim)
        log.info("job %s (%s): claimed%s", claim.job_id, claim.task_id,
                 f" after {claim.crashes} worker crash(es)" if claim.crashes else "")
        if claim.crashes >= self.policy.max_worker_crashes:
            verdict = crash_loop_verdict(claim.task_id, self.devices[0], claim.source_sha256, claim.crashes)
            self._finish(claim, verdict)
            return
        with self.lock:
            self.compiling += 1
        self.to_compile.put(claim)

    # --- stages ------------------------------------------------------------------------------------

    def _compile_loop(self) -> None:
        while True:
            claim = self.to_compile.get()
            try:
                self._compile(claim)
            except Exception:
                log.exception("job %s: compile stage failed", claim.job_id)
            finally:
                with self.lock:
                    self.compiling -= 1
                self.wake.set()

    def _compile(self, claim: q.Claim) -> None:
        if self.stopping.is_set():
            self._release(claim)
            return
        try:
            result = self.judge.prepare(claim.task_id, claim.source, target=self.target)
        except Exception as exc:  # the judge's own failure: system_error, retried with backoff
            result = system_error(claim.task_id, self.target, claim.source_sha256, "prepare", exc)
        if isinstance(result, Verdict):
            self._finish(claim, result)
            return
        if self.stopping.is_set():
            self._release(claim)
            return
        if not q.advance(self.db, claim.token, JobState.COMPILED, build_key=result.build_key,
                         compile_cached=result.compile_cached):
            self._forget(claim, "taken away while compiling")
            return
        self.compiled.put((claim, result))

    def _execute_loop(self, device: str) -> None:
        while True:
            claim, prepared = self.compiled.get()
            try:
                self._execute(claim, prepared, device)
            except Exception:
                log.exception("job %s: execute stage failed", claim.job_id)
            finally:
                self.wake.set()

    def _execute(self, claim: q.Claim, prepared: PreparedCandidate, device: str) -> None:
        if self.stopping.is_set():
            self._release(claim)
            return
        if not q.advance(self.db, claim.token, JobState.RUNNING):
            self._forget(claim, "taken away while waiting for the device")
            return
        with self.lock:
            if claim.token in self.held:
                self.held[claim.token].phase = "running"
        try:
            verdict = self.judge.execute(prepared, device)
        except Exception as exc:
            verdict = system_error(claim.task_id, device, claim.source_sha256, "execute", exc)
        self._finish(claim, verdict)

    # --- outcomes ----------------------------------------------------------------------------------

    def _finish(self, claim: q.Claim, verdict: Verdict) -> None:
        outcome = "lost"
        for attempt in range(FINISH_RETRIES):
            try:
                outcome = q.finish(self.db, claim.token, verdict, self.worker_id, self.policy)
                break
            except Exception:
                log.exception("job %s: recording the verdict failed (attempt %d)", claim.job_id, attempt + 1)
                time.sleep(2 ** attempt)
        self._forget(claim, None)
        if outcome == "verdict":
            self.judged += 1
        log.info("job %s: %s (%s)%s", claim.job_id, verdict.status.value, outcome,
                 "" if outcome != "lost" else ": the job was reclaimed by another worker; result discarded")

    def _release(self, claim: q.Claim) -> None:
        try:
            q.release(self.db, claim.token)
            log.info("job %s: released to the queue", claim.job_id)
        except Exception:
            log.exception("job %s: release failed; its lease will expire", claim.job_id)
        self._forget(claim, None)

    def _forget(self, claim: q.Claim, why: str | None) -> None:
        with self.lock:
            self.held.pop(claim.token, None)
        if why:
            log.warning("job %s: %s", claim.job_id, why)

    def _release_all(self) -> None:
        with self.lock:
            held = [h.claim for h in self.held.values()]
        for claim in held:
            self._release(claim)

    def _heartbeats(self) -> None:
        interval = max(0.2, self.settings.lease_s / 4)
        while True:
            time.sleep(interval)
            with self.lock:
                tokens = list(self.held)
            try:
                lost = q.heartbeat(self.db, tokens, self.settings.lease_s)
            except Exception:
                log.exception("heartbeat failed")
                continue
            with self.lock:
                for token in lost:
                    h = self.held.pop(token, None)
                    if h is not None:
                        log.warning("job %s: lease lost; its result will be discarded", h.claim.job_id)

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
                self._release(claim)
            with self.lock:
                if not self.held:
                    break
            self.wake.wait(0.1)
            self.wake.clear()
        self._release_all()
        log.info("worker %s: stopped after %d verdicts", self.worker_id, self.judged)
