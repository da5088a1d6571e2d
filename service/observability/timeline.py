"""The device-busy timeline: which job held which device when, how busy each device was, and any overlap.

A *hold* is one claim's `sandbox.execute` on one device, as the worker stamped it on the claim's `job_attempts`
row (service.worker.holds): a lane (`host/device`, one physical device), a start and an end. From the holds:

- busy seconds and busy fraction per lane over a window (the union of its holds, so an overlap is not counted
  twice);
- overlaps: two holds of one lane at the same instant, i.e. a device running two jobs at once, which the worker
  must never do (a candidate timed while another runs on its device is timed wrong);
- an SVG (one lane per device, one bar per hold, overlaps in red) and a plain-text summary.

`utilization_spans` turns sampled utilization (nvidia-smi's) into the same kind of spans, so the time a device
computed can be drawn as the time it was held is.

A hold whose end was not stamped (the job is still executing, or its worker died during it, or the stamp's write
failed) is *open*: it is drawn up to the claim's end (the reclaim, for a dead worker) or to `now`, the longest it
can have lasted, so that an overlap with it is reported rather than missed.

The SVG follows the rule of service.web.plots (markup only from numbers formatted here and escaped labels) but
carries its own style: it is a file opened on its own, not a figure inside a page whose CSS styles it.
"""

from __future__ import annotations

import datetime as dt
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from markupsafe import escape
from sqlalchemy import select
from sqlalchemy.orm import Session

from service.db.models import Job, JobAttempt, Submission, VerdictRow, utcnow


@dataclass(frozen=True)
class Hold:
    lane: str
    """`host/device`: one physical device."""
    job_id: int
    submission_id: str
    worker_id: str
    start: dt.datetime
    end: dt.datetime
    closed: bool
    """True when the end was stamped (execute returned); False: still running, or its worker died during it."""
    result: str
    """The verdict status when this claim recorded the job's verdict; else the claim's outcome ("retry",
    "crashed", "released", ...), or "running"."""

    @property
    def seconds(self) -> float:
        return (self.end - self.start).total_seconds()


@dataclass(frozen=True)
class Overlap:
    """Two holds of one lane that share an instant: the device ran two jobs at once."""

    lane: str
    first: Hold
    second: Hold

    @property
    def seconds(self) -> float:
        return (min(self.first.end, self.second.end) - self.second.start).total_seconds()


# --- reading holds ------------------------------------------------------------------------------------


def load_holds(session: Session, *, batch_id: str | None = None, since: dt.datetime | None = None,
               until: dt.datetime | None = None, now: dt.datetime | None = None) -> list[Hold]:
    """Every recorded hold of a batch's jobs (or of all jobs), those that overlap [since, until] when given;
    sorted by start."""
    now = now or utcnow()
    query = (select(JobAttempt, Job.submission_id, VerdictRow.status)
             .join(Job, Job.id == JobAttempt.job_id)
             .outerjoin(VerdictRow, VerdictRow.submission_id == Job.submission_id)
             .where(JobAttempt.execute_started_at.is_not(None), JobAttempt.device.is_not(None))
             .order_by(JobAttempt.execute_started_at, JobAttempt.id))
    if batch_id is not None:
        query = query.join(Submission, Submission.id == Job.submission_id).where(Submission.batch_id == batch_id)
    if until is not None:
        query = query.where(JobAttempt.execute_started_at <= until)
    holds = []
    for attempt, submission_id, status in session.execute(query):
        closed = attempt.execute_ended_at is not None
        end = attempt.execute_ended_at or attempt.ended_at or now
        if since is not None and end < since:
            continue
        if attempt.outcome == "verdict" and status is not None:
            result = status.value
        else:
            result = attempt.outcome or "running"
        start = attempt.execute_started_at
        holds.append(Hold(lane=attempt.device, job_id=attempt.job_id, submission_id=submission_id,
                          worker_id=attempt.worker_id, start=start, end=max(end, start), closed=closed,
                          result=result))
    return holds


def executed_without_hold(session: Session, *, batch_id: str | None = None) -> int:
    """Claims that recorded a verdict after executing (the job has a `run_started_at`) but have no hold: the
    timeline cannot place them. Zero unless a stamp's write failed or the rows predate migration 0006."""
    query = (select(JobAttempt.id).join(Job, Job.id == JobAttempt.job_id)
             .where(JobAttempt.outcome == "verdict", Job.run_started_at.is_not(None),
                    JobAttempt.execute_started_at.is_(None)))
    if batch_id is not None:
        query = query.join(Submission, Submission.id == Job.submission_id).where(Submission.batch_id == batch_id)
    return len(session.scalars(query).all())


# --- measures -----------------------------------------------------------------------------------------


def by_lane(holds: Iterable[Hold]) -> dict[str, list[Hold]]:
    lanes: dict[str, list[Hold]] = defaultdict(list)
    for h in holds:
        lanes[h.lane].append(h)
    return {lane: sorted(hs, key=lambda h: (h.start, h.end)) for lane, hs in sorted(lanes.items())}


def span(holds: Sequence[Hold]) -> tuple[dt.datetime, dt.datetime] | None:
    """From the first hold's start to the last hold's end: the device stage of a batch."""
    if not holds:
        return None
    return min(h.start for h in holds), max(h.end for h in holds)


def busy_seconds(holds: Iterable[Hold], start: dt.datetime, end: dt.datetime) -> dict[str, float]:
    """Seconds of [start, end] during which each lane held at least one job (the union of its holds)."""
    out = {}
    for lane, hs in by_lane(holds).items():
        total, cursor = 0.0, start
        for h in hs:  # sorted by start: add only the part past what is already counted
            lo, hi = max(h.start, cursor), min(h.end, end)
            if hi > lo:
                total += (hi - lo).total_seconds()
            cursor = max(cursor, min(h.end, end))
        out[lane] = total
    return out


def busy_fraction(holds: Iterable[Hold], start: dt.datetime, end: dt.datetime) -> dict[str, float]:
    """Busy seconds of each lane over the window's length (0 for an empty window)."""
    window = (end - start).total_seconds()
    return {lane: (s / window if window > 0 else 0.0) for lane, s in busy_seconds(holds, start, end).items()}


def overlaps(holds: Iterable[Hold]) -> list[Overlap]:
    """Every pair of holds of one lane that share an instant. Touching (one ends when the next starts) is not an
    overlap: an executor stamps its next start after the previous end."""
    found = []
    for lane, hs in by_lane(holds).items():
        active: list[Hold] = []
        for h in hs:  # sweep by start: the holds still running when h starts overlap it
            active = [a for a in active if a.end > h.start]
            found += [Overlap(lane, a, h) for a in active]
            active.append(h)
    return found


# --- rendering ----------------------------------------------------------------------------------------

COLOURS = {"correct": "#2f7d32", "incorrect": "#c77700", "running": "#777777"}
"""Bar colour by result; every other verdict or outcome is blue. Overlapping parts are drawn red on top."""
OTHER, OVERLAP = "#3566a8", "#d00000"
WIDTH, LANE_H, LEFT, RIGHT, TOP, BOTTOM = 960, 34, 230, 16, 28, 40


def _naive_utc(unix_s: float) -> dt.datetime:
    return dt.datetime.fromtimestamp(unix_s, dt.timezone.utc).replace(tzinfo=None)


def utilization_spans(samples: Iterable[tuple[float, int, float]]) -> list[Hold]:
    """(unix time, gpu index, utilization %) samples -> one span per run of samples above zero on a GPU, from the
    sample before the run's first (a sample reports activity during the period just before it) to the first
    sample at zero after it, or to the last sample. Lanes are `GPU <index>`; job ids number the spans. Times are
    naive UTC, as the holds' stamps are."""
    spans: list[Hold] = []
    by_gpu: dict[int, list[tuple[float, float]]] = defaultdict(list)
    for t, gpu, util in sorted(samples):
        by_gpu[gpu].append((t, util))

    def add(gpu: int, start: float, end: float) -> None:
        spans.append(Hold(lane=f"GPU {gpu}", job_id=len(spans), submission_id="", worker_id="",
                          start=_naive_utc(start), end=_naive_utc(end), closed=True, result="busy"))

    for gpu, rows in sorted(by_gpu.items()):
        start = None
        for i, (t, util) in enumerate(rows):
            if util > 0 and start is None:
                start = rows[i - 1][0] if i else t
            elif util <= 0 and start is not None:
                add(gpu, start, t)
                start = None
        if start is not None:
            add(gpu, start, rows[-1][0])
    return spans


def render_svg(holds: Sequence[Hold], *, title: str = "device holds", start: dt.datetime | None = None,
               end: dt.datetime | None = None) -> str:
    """One lane per device, one bar per hold (hover: job, result, seconds), overlaps in red, a seconds axis."""
    lanes = by_lane(holds)
    window = span(holds)
    t0 = start or (window[0] if window else utcnow())
    t1 = end or (window[1] if window else t0)
    length = max((t1 - t0).total_seconds(), 1e-3)
    height = TOP + LANE_H * max(len(lanes), 1) + BOTTOM
    plot_w = WIDTH - LEFT - RIGHT

    def x(t: dt.datetime) -> float:
        return LEFT + max(0.0, min(1.0, (t - t0).total_seconds() / length)) * plot_w

    fractions = busy_fraction(holds, t0, t1)
    body = [f'<text class="title" x="{LEFT}" y="18">{escape(title)}</text>']
    for i, (lane, hs) in enumerate(lanes.items()):
        y = TOP + LANE_H * i
        body.append(f'<text class="lane" x="{LEFT - 8}" y="{y + LANE_H / 2 + 4:.1f}" text-anchor="end">'
                    f'{escape(lane)} ({fractions.get(lane, 0.0) * 100:.0f}% busy)</text>'
                    f'<line class="grid" x1="{LEFT}" y1="{y + LANE_H}" x2="{WIDTH - RIGHT}" y2="{y + LANE_H}"/>')
        for h in hs:
            colour = COLOURS.get(h.result, OTHER)
            dash = "" if h.closed else ' stroke="#000" stroke-dasharray="3 2"'
            body.append(f'<rect x="{x(h.start):.1f}" y="{y + 5:.1f}" width="{max(x(h.end) - x(h.start), 0.8):.1f}" '
                        f'height="{LANE_H - 10}" fill="{colour}"{dash}><title>job {h.job_id}: '
                        f'{escape(h.result)}, {h.seconds:.2f} s{"" if h.closed else " (end not stamped)"}'
                        f'</title></rect>')
    for o in overlaps(holds):
        y = TOP + LANE_H * list(lanes).index(o.lane)
        lo, hi = x(o.second.start), x(min(o.first.end, o.second.end))
        body.append(f'<rect x="{lo:.1f}" y="{y + 2:.1f}" width="{max(hi - lo, 1.5):.1f}" height="{LANE_H - 4}" '
                    f'fill="{OVERLAP}" fill-opacity="0.8"><title>OVERLAP: jobs {o.first.job_id} and '
                    f'{o.second.job_id} at once, {o.seconds:.2f} s</title></rect>')
    axis_y = height - BOTTOM
    body.append(f'<line class="axis" x1="{LEFT}" y1="{axis_y}" x2="{WIDTH - RIGHT}" y2="{axis_y}"/>')
    for k in range(6):
        s = length * k / 5
        tx = LEFT + plot_w * k / 5
        body.append(f'<text class="tick" x="{tx:.1f}" y="{axis_y + 15}" text-anchor="middle">{s:.1f}</text>')
    body.append(f'<text class="tick" x="{LEFT + plot_w / 2:.1f}" y="{height - 6}" text-anchor="middle">seconds '
                f'from {t0:%Y-%m-%d %H:%M:%S} UTC; green correct, amber incorrect, blue other verdicts, red: two '
                f'jobs at once</text>')
    style = ("<style>text{font:12px sans-serif;fill:#222}.title{font-weight:bold}.tick{font-size:11px;fill:#555}"
             ".axis{stroke:#333}.grid{stroke:#ddd}</style>")
    return (f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {WIDTH} {height}" width="{WIDTH}" '
            f'height="{height}" role="img" aria-label="{escape(title)}"><title>{escape(title)}</title>{style}'
            + "".join(body) + "</svg>\n")


def summary(holds: Sequence[Hold], *, start: dt.datetime | None = None, end: dt.datetime | None = None) -> str:
    """Plain text: the window, per lane its holds, busy seconds and fraction, then every overlap."""
    window = span(holds)
    if window is None:
        return "no device holds recorded"
    t0, t1 = start or window[0], end or window[1]
    busy = busy_seconds(holds, t0, t1)
    length = (t1 - t0).total_seconds()
    lines = [f"window {t0:%H:%M:%S.%f}"[:-3] + f" to {t1:%H:%M:%S.%f}"[:-3] + f" UTC ({length:.2f} s)"]
    for lane, hs in by_lane(holds).items():
        open_ = sum(not h.closed for h in hs)
        percent = busy[lane] / length * 100 if length else 0.0
        lines.append(f"  {lane}: {len(hs)} holds, busy {busy[lane]:.2f} s ({percent:.1f}%)"
                     + (f", {open_} without a stamped end" if open_ else ""))
    found = overlaps(holds)
    lines.append(f"overlaps (a device running two jobs at once): {len(found)}")
    lines += [f"  {o.lane}: jobs {o.first.job_id} and {o.second.job_id}, {o.seconds:.3f} s" for o in found]
    return "\n".join(lines)
