"""Record when a claim held a device: the start and end of `sandbox.execute`, on its `job_attempts` row.

These rows are what the device-busy timeline (service.observability.timeline) is drawn from, and what shows
whether a device ever ran two jobs at once. A device is named as a *lane*, `host/device`, with
CUDA_VISIBLE_DEVICES resolved, so that the name means one physical device: two worker processes on one host
that were given the same GPU (JUDGE_DEVICES=cuda:0 in both, or CUDA_VISIBLE_DEVICES=1 and cuda:0 in one of
them and JUDGE_DEVICES=cuda:1 in another) land in one lane, and their overlaps are seen.

The times are the worker host's wall clock (UTC). Only holds of one lane, hence of one host, are compared
with each other, so clocks of different hosts need not agree.

Nothing depends on these rows for safety (leases and claim tokens do that): a failed write is logged and the
job goes on; the timeline then lacks that hold and says how many claims it could not place.
"""

from __future__ import annotations

import datetime as dt
import logging
import os
import socket

from sqlalchemy import update

from service.db.models import JobAttempt, utcnow
from service.db.session import Database

log = logging.getLogger(__name__)


def lane(device: str, host: str | None = None, visible: str | None = None) -> str:
    """`host/device` for a worker's device string; `cuda:N` becomes the N-th entry of CUDA_VISIBLE_DEVICES (an
    index or a GPU UUID) when that variable is set, so the lane names the physical GPU, not the process's view."""
    host = host or socket.gethostname()
    visible = os.environ.get("CUDA_VISIBLE_DEVICES") if visible is None else visible
    kind, _, index = device.partition(":")
    if kind == "cuda" and visible:
        entries = [v.strip() for v in visible.split(",") if v.strip()]
        n = int(index) if index.isdigit() else 0  # torch's "cuda" is the current device, 0 in a fresh process
        if n < len(entries):
            device = f"cuda:{entries[n]}"
    return f"{host}/{device}"


def sandbox_device(device: str) -> str:
    """The device the sandbox judges on. `cpu:N` is a *virtual* CPU device: a name that gives one executor of a
    worker (or one worker) its own lane, so that several executors on the CPU can be tested and measured as
    several devices are; the sandbox is given plain `cpu` (torch's CPU tensors report `cpu` whatever index was
    asked, and the verdict's device is the CPU). They share the CPU's cores: their timings are not independent."""
    return "cpu" if device.partition(":")[0] == "cpu" else device


def started(db: Database, token: str, device_lane: str) -> dt.datetime:
    """Stamp the claim's device and execute start; returns the stamp. Taken before the write, so the recorded
    hold begins no later than the device is used."""
    at = utcnow()
    try:
        with db.transaction() as session:
            session.execute(update(JobAttempt).where(JobAttempt.claim_token == token)
                            .values(device=device_lane, execute_started_at=at))
    except Exception:  # the timeline loses one hold; judging goes on
        log.exception("could not record the start of a device hold")
    return at


def ended(db: Database, token: str) -> dt.datetime:
    """Stamp the claim's execute end (called once sandbox.execute has returned, before the verdict is written)."""
    at = utcnow()
    try:
        with db.transaction() as session:
            session.execute(update(JobAttempt).where(JobAttempt.claim_token == token).values(execute_ended_at=at))
    except Exception:  # the hold stays open in the timeline, bounded by the claim's end
        log.exception("could not record the end of a device hold")
    return at
