"""Prometheus metrics at GET /metrics, computed from the database at scrape time.

Workers run on other hosts, so nothing is kept in this process: queue depth and verdict counts are
`GROUP BY` queries, and worker figures (stage-duration histograms, device busy seconds, outcomes,
heartbeats) are the sums of what each worker writes to its `workers` row (service.observability.stats).
Any API process answers the same numbers. A scrape while the database is away answers 503.

    judge_queue_jobs{task,state}                  jobs not yet done, by state (zeros included)
    judge_verdicts_total{task,status}             stored verdicts (final results), by status
    judge_jobs_waiting{cause}                     queued jobs waiting for the host's lasting failure to pass
                                                  (disk_full: the build disk; service.queue.requeue)
    judge_finish_outcomes_total{outcome}          verdict / retry / lost, as recorded by workers
    judge_stage_duration_seconds{stage}           histogram: compile, device_wait, execute, record
    judge_device_busy_seconds_total{host,device}  seconds a device spent executing candidates
    judge_worker_last_seen_timestamp_seconds{worker}, judge_worker_up{worker}, judge_worker_held_jobs{worker}
    judge_worker_stalled_jobs{worker}             jobs a live worker's watchdog found stalled whose threads are
                                                  still stuck (service.worker.watchdog); non-zero: restart it
    judge_stalls_total{phase}                     stalls found by workers' watchdogs, by the phase stuck in
"""

from __future__ import annotations

import datetime as dt
from collections import defaultdict
from collections.abc import Iterable

from fastapi import APIRouter, Response
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from sqlalchemy import func, select
from sqlalchemy.orm import Session

from reference import all_tasks
from service.api.deps import DatabaseDep, SettingsDep
from service.api.errors import responses
from service.db.models import Job, VerdictRow, WorkerRow, utcnow
from service.observability.stats import BUCKETS_S
from service.queue import requeue
from service.queue.states import FINAL, JobState, Stage

router = APIRouter(tags=["health"])

WORKER_SERIES_WINDOW = dt.timedelta(hours=1)
"""Per-worker series are emitted for workers seen this recently (a dead worker's series end an hour later);
the sums (histograms, busy seconds, outcomes) include every row ever written, so counters never go back."""


def _epoch(value: dt.datetime) -> float:
    return value.replace(tzinfo=dt.timezone.utc).timestamp()


def queue_families(session: Session) -> Iterable[Metric]:
    depth = GaugeMetricFamily("judge_queue_jobs", "Jobs not yet done, by task and state", labels=["task", "state"])
    query = (select(Job.task_id, Job.state, func.count()).where(Job.state.not_in(FINAL))
             .group_by(Job.task_id, Job.state))
    counts = {(t, s): n for t, s, n in session.execute(query)}
    tasks = sorted({t.id.value for t in all_tasks()} | {t for t, _ in counts})
    for task in tasks:
        for state in JobState:
            if state not in FINAL:
                depth.add_metric([task, state.value], counts.get((task, state), 0))
    yield depth
    yield _stage_backlog(session)
    verdicts = CounterMetricFamily("judge_verdicts", "Stored verdicts by task and status", labels=["task", "status"])
    for task, status, n in session.execute(select(VerdictRow.task_id, VerdictRow.status, func.count())
                                           .group_by(VerdictRow.task_id, VerdictRow.status)):
        verdicts.add_metric([task, status.value], n)
    yield verdicts
    waiting = GaugeMetricFamily("judge_jobs_waiting", "Queued jobs waiting for a cause of the host's to pass (the "
                                "judge's full disk) before they are judged again", labels=["cause"])
    for cause, n in sorted(requeue.waiting_now(session).items()):
        waiting.add_metric([cause], n)
    yield waiting


def _stage_backlog(session: Session) -> Metric:
    """Queued jobs per stage (service.queue.states.Stage): the build backlog is what builders are scaled on
    (deploy/k8s/base/builder.yaml), the run backlog what GPU workers are."""
    backlog = GaugeMetricFamily("judge_stage_backlog_jobs", "Queued jobs waiting for a claim, by stage: build (no "
                                "artifact yet) or run (built by a builder)", labels=["stage"])
    built = Job.artifact_sha256.is_not(None)
    query = select(built, func.count()).where(Job.state == JobState.QUEUED).group_by(built)
    counts = dict(session.execute(query).all())
    backlog.add_metric([Stage.BUILD.value], counts.get(False, 0))
    backlog.add_metric([Stage.RUN.value], counts.get(True, 0))
    return backlog


def worker_families(session: Session, lease_s: float) -> Iterable[Metric]:
    rows = session.scalars(select(WorkerRow)).all()
    now = utcnow()
    stages: dict[str, dict] = defaultdict(lambda: {"buckets": [0] * len(BUCKETS_S), "count": 0, "sum": 0.0})
    busy: dict[tuple[str, str], float] = defaultdict(float)
    outcomes: dict[str, int] = defaultdict(int)
    stalls: dict[str, int] = defaultdict(int)
    artifact_events: dict[str, int] = defaultdict(int)
    seen = GaugeMetricFamily("judge_worker_last_seen_timestamp_seconds", "Last heartbeat of a worker (unix time)",
                             labels=["worker"])
    up = GaugeMetricFamily("judge_worker_up", "1 while a worker heartbeats within two leases and has not stopped",
                           labels=["worker"])
    held = GaugeMetricFamily("judge_worker_held_jobs", "Jobs a worker held at its last heartbeat", labels=["worker"])
    stalled = GaugeMetricFamily("judge_worker_stalled_jobs", "Jobs a live worker's watchdog found stalled whose "
                                "threads are still stuck", labels=["worker"])
    for row in rows:
        stats = row.stats or {}
        for stage, h in (stats.get("stages") or {}).items():
            total = stages[stage]
            total["buckets"] = [a + b for a, b in zip(total["buckets"], h["buckets"])]
            total["count"] += h["count"]
            total["sum"] += h["sum"]
        for device, seconds in (stats.get("device_busy_s") or {}).items():
            busy[(row.host, device)] += seconds
        for outcome, n in (stats.get("outcomes") or {}).items():
            outcomes[outcome] += n
        for phase, n in (stats.get("stalls") or {}).items():
            stalls[phase] += n
        for event, n in (stats.get("artifacts") or {}).items():
            artifact_events[event] += n
        if now - row.last_seen_at <= WORKER_SERIES_WINDOW:
            alive = row.stopped_at is None and (now - row.last_seen_at).total_seconds() <= 2 * lease_s
            seen.add_metric([row.id], _epoch(row.last_seen_at))
            up.add_metric([row.id], 1.0 if alive else 0.0)
            held.add_metric([row.id], len(row.current_jobs or []) if alive else 0)
            stalled.add_metric([row.id], len(stats.get("stalled") or []) if alive else 0)
    yield from (seen, up, held, stalled)
    hist = HistogramMetricFamily("judge_stage_duration_seconds", "Time jobs spent in each worker stage",
                                 labels=["stage"])
    for stage, h in sorted(stages.items()):
        cumulative, running = [], 0
        for bound, n in zip(BUCKETS_S, h["buckets"]):
            running += n
            cumulative.append((str(bound), running))
        cumulative.append(("+Inf", h["count"]))
        hist.add_metric([stage], cumulative, h["sum"])
    yield hist
    device = CounterMetricFamily("judge_device_busy_seconds", "Seconds a device spent executing candidates",
                                 labels=["host", "device"])
    for (host, name), seconds in sorted(busy.items()):
        device.add_metric([host, name], seconds)
    yield device
    yield from _counters(outcomes, stalls, artifact_events)


def _counters(outcomes: dict[str, int], stalls: dict[str, int], artifacts: dict[str, int]) -> Iterable[Metric]:
    """The counter families summed over the workers' rows."""
    families = [("judge_finish_outcomes", "Results recorded by workers: verdict, retry, lost", "outcome", outcomes),
                ("judge_stalls", "Held jobs workers' watchdogs found stalled, by the phase they were stuck in",
                 "phase", stalls),
                ("judge_artifacts", "Build artifacts handed from builders to run workers: published, installed, "
                 "local (the run worker had the build), refused_<why>", "event", artifacts)]
    for name, help_text, label, counts in families:
        family = CounterMetricFamily(name, help_text, labels=[label])
        for value, n in sorted(counts.items()):
            family.add_metric([value], n)
        yield family


class _Snapshot:
    """A collector that yields families already read (the database is queried once, before rendering)."""

    def __init__(self, families: list[Metric]) -> None:
        self.families = families

    def collect(self) -> Iterable[Metric]:
        return self.families


def render(session: Session, lease_s: float) -> bytes:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(_Snapshot([*queue_families(session), *worker_families(session, lease_s)]))
    return generate_latest(registry)


@router.get("/metrics", summary="Prometheus metrics", response_class=Response,
            responses={200: {"content": {CONTENT_TYPE_LATEST: {}}, "description": "Prometheus text format"},
                       **responses(503)})
def metrics(db: DatabaseDep, settings: SettingsDep) -> Response:
    with db.transaction(read_only=True) as session:
        body = render(session, settings.lease_s)
    return Response(body, media_type=CONTENT_TYPE_LATEST)
