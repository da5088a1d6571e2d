"""The shared precompiled headers a worker builds in the background when it starts, and how far it has got.

Why: the first C++ build on a host builds the precompiled torch/extension.h of its flags (sandbox/build/accel.py),
minutes of g++ on a small machine, and its submitter saw nothing but "compiling" meanwhile. The worker starts
`sandbox.warm_headers` on a thread of its own as it starts (Settings.warm_headers: which flag sets, in order), and
writes the progress into its `workers` row (`stats[KEY]`, published at each change and every heartbeat).
/readyz, a waiting submission's JSON (so `submit --wait`'s line) and its page read it back with `progress`.

A candidate whose flags' header is being built waits for that build (the sandbox's lock) rather than building it
a second time; the build's seconds then show in its verdict's build time, as before.
"""

from __future__ import annotations

import datetime as dt
import logging
import os
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

import sandbox
from service.api.schemas import HeaderVariant, SharedHeaders
from service.db.models import WorkerRow, utcnow

log = logging.getLogger(__name__)

KEY = "shared_headers"
"""The worker row's `stats` key holding the progress."""
WAITING, BUILDING, READY, FAILED = "waiting", "building", "ready", "failed"
LATER_VARIANTS_NICE = 19
"""The niceness of the thread building every variant after the first (and of its compilers)."""


def label(flags: tuple[str, ...]) -> str:
    """A flag set as the settings and pages write it: "-O2", or "plain" for no extra flags."""
    return " ".join(flags) or "plain"


class HeaderBuild:
    """One worker's background build: each variant's state, and the thread building them one after the other."""

    def __init__(self, flag_sets: list[tuple[str, ...]], on_change: Callable[[], None] = lambda: None) -> None:
        self.flag_sets = flag_sets
        self.on_change = on_change
        self._variants = {flags: {"flags": label(flags), "state": WAITING, "seconds": None, "since": None}
                          for flags in flag_sets}
        self._lock = threading.Lock()

    def start(self, cache_root: Path, target: str) -> threading.Thread | None:
        """Start building on a daemon thread (its compilers die with the worker); None when nothing is asked."""
        if not self.flag_sets:
            return None
        thread = threading.Thread(target=self._run, args=(cache_root, target), name="shared-headers", daemon=True)
        thread.start()
        return thread

    def _run(self, cache_root: Path, target: str) -> None:
        try:
            first, rest = self.flag_sets[:1], self.flag_sets[1:]
            sandbox.warm_headers(cache_root, target, first, on_progress=self._progress)
            if rest:
                # The first variant is the one most candidates build with (Settings.warm_headers' order); the others
                # at the lowest priority (this thread's, which its compilers inherit), on what candidates' own builds
                # leave: the README's tour waited 372 s for its batch of ten on a 2-core box while the plain and -O3
                # headers, which none of its candidates used, were built beside it.
                os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), LATER_VARIANTS_NICE)
                sandbox.warm_headers(cache_root, target, rest, on_progress=self._progress)
        except Exception:  # a bug of ours must not take the worker down: candidates build their headers themselves
            log.exception("building the shared precompiled headers failed")
            with self._lock:
                for variant in self._variants.values():
                    if variant["state"] in (WAITING, BUILDING):
                        variant["state"] = FAILED
            self.on_change()

    def _progress(self, flags: tuple[str, ...], state: str, seconds: float | None) -> None:
        with self._lock:
            variant = self._variants[flags]
            variant["state"], variant["seconds"] = state, seconds
            variant["since"] = utcnow().isoformat() if state == BUILDING else None
        log.info("shared precompiled headers %s: %s%s", label(flags), state,
                 "" if seconds is None else f" in {seconds:.1f} s")
        self.on_change()

    def snapshot(self) -> dict[str, Any]:
        """The worker row's `stats[KEY]`: every variant in order (flags, state, seconds, since), or {} when
        nothing is built."""
        if not self.flag_sets:
            return {}
        with self._lock:
            return {KEY: [dict(self._variants[flags]) for flags in self.flag_sets]}


def summary(worker: str, variants: list[dict[str, Any]], now: dt.datetime) -> SharedHeaders:
    """What the pages and the API show of one worker's `stats[KEY]`."""
    building = next((v for v in variants if v["state"] == BUILDING), None)
    since = dt.datetime.fromisoformat(building["since"]) if building and building.get("since") else None
    return SharedHeaders(
        state="building" if any(v["state"] in (WAITING, BUILDING) for v in variants) else "done",
        ready=sum(v["state"] == READY for v in variants), total=len(variants),
        building=building["flags"] if building else None,
        building_s=round(max(0.0, (now - since).total_seconds()), 1) if since else None,
        variants=[HeaderVariant(flags=v["flags"], state=v["state"], seconds=v["seconds"]) for v in variants],
        worker=worker)


def progress(session: Session) -> SharedHeaders | None:
    """The header build of the running workers: one still building if any (the one furthest behind), else the
    newest done; None when no running worker builds any (Settings.warm_headers off, or no worker)."""
    rows = session.execute(select(WorkerRow.id, WorkerRow.stats, WorkerRow.started_at)
                           .where(WorkerRow.stopped_at.is_(None)).order_by(WorkerRow.started_at.desc())).all()
    now = utcnow()
    found = [summary(ident, (stats or {})[KEY], now) for ident, stats, _ in rows if (stats or {}).get(KEY)]
    building = [s for s in found if s.state == "building"]
    if building:
        return min(building, key=lambda s: s.ready)
    return found[0] if found else None


def still_building(session: Session) -> SharedHeaders | None:
    """`progress` while a running worker is still building (what a waiting submission shows), else None."""
    found = progress(session)
    return found if found is not None and found.state == "building" else None
