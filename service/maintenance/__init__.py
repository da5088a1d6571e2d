"""Retention: keep the build cache under a size and prune old artifacts, never losing a verdict.

`run_maintenance(settings)` is the one entry point (for `kernel-judge` and for workers); the modules
below do one job each: `build_cache` (LRU eviction by size), `artifacts` (leftover run directories,
old job-attempt rows); builders' stored artifacts no waiting job needs go by service.artifacts.store.prune.
"""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

from sandbox.config import JudgeConfig
from service.artifacts import store
from service.core.config import Settings
from service.db.session import Database
from service.maintenance.artifacts import prune_artifacts
from service.maintenance.build_cache import evict_builds


def run_maintenance(settings: Settings, *, max_bytes: int | None = None, older_than_days: float | None = None,
                    dry_run: bool = False, db: Database | None = None) -> dict[str, Any]:
    """Evict builds beyond `max_bytes` (default JUDGE_BUILD_CACHE_MAX_BYTES; None: no eviction) and prune
    artifacts older than `older_than_days` (default JUDGE_ARTIFACT_RETENTION_DAYS). Returns both reports."""
    config = JudgeConfig()
    own = db is None
    db = db or Database(settings.db_url)
    try:
        limit = settings.build_cache_max_bytes if max_bytes is None else max_bytes
        days = settings.artifact_retention_days if older_than_days is None else older_than_days
        report: dict[str, Any] = {"build_root": str(config.build_root)}
        if limit is not None:
            report["builds"] = asdict(evict_builds(db, config.build_root, limit, dry_run=dry_run))
        report["artifacts"] = asdict(prune_artifacts(db, config.build_root.parent / "runs", days, dry_run=dry_run))
        with db.transaction() as session:  # builders' artifacts (service/artifacts) no waiting job needs
            report["stored_artifacts_removed"] = store.prune(session, dry_run=dry_run)
        return report
    finally:
        if own:
            db.dispose()


__all__ = ["evict_builds", "prune_artifacts", "run_maintenance"]
