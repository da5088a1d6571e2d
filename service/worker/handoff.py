"""The hand-over of a build between roles (service/worker/roles.py): a builder publishes, a run worker accepts.

Publish (builder): pack the build directory (sandbox/artifacts.py), store it by its build key (service/artifacts),
and give the job back in the run stage with the artifact's digest (service/queue/claims.py `publish`).

Accept (run worker, before `prepare`): derive the build key itself from the candidate's text and its own toolchain,
take the artifact only if the job names that key, the stored bytes match the digest the job recorded and the
manifest names that key, and unpack it into its own build root (sandbox/artifacts.py says what is checked there).
`prepare` then finds the build stored, and the candidate runs in the same sandboxed child as a build made here.
Anything refused is an infrastructure fault, never the candidate's: it is logged, counted
(`judge_artifacts{event="refused_<reason>"}`), and the run worker builds the candidate itself.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from sandbox import PreparedCandidate, artifacts
from service.artifacts import store
from service.queue import claims as q

if TYPE_CHECKING:
    from service.worker.runner import Worker

log = logging.getLogger("service.worker")


def publish(worker: Worker, claim: q.Claim, prepared: PreparedCandidate) -> bool:
    """Publish the build and hand the job on; False when the job was not handed on (it is let go: its lease or
    release returns it to the build stage)."""
    try:
        data = artifacts.pack(prepared.build_key, prepared.build_dir, log=prepared.compile_log,
                              seconds=prepared.stages.get("compile", 0.0))
        sha = store.put(worker.db, prepared.build_key, data, worker.worker_id)
        handed = q.publish(worker.db, claim.token, prepared.build_key, sha, compile_cached=prepared.compile_cached)
    except Exception:  # the database away, a build dir we cannot read: the job goes back to be built again
        log.exception("job %s: publishing its build failed", claim.job_id)
        worker._let_go(claim)
        return False
    worker._forget(claim, None if handed else "taken away before its build was published")
    if handed:
        worker.stats.artifact("published")
        log.info("job %s: built (%s), artifact %s... published (%d bytes)", claim.job_id,
                 "cached" if prepared.compile_cached else "fresh", sha[:12], len(data))
    return handed


def accept(worker: Worker, claim: q.Claim) -> str:
    """Install the job's artifact in this worker's build root; returns what happened ("installed", "local": this
    host had the build already, or "refused_<reason>"). Never raises for the artifact's sake."""
    config = worker.judge_config
    try:
        want = artifacts.expected(claim.task_id, claim.source, worker.target, config)
        if want is None:
            raise artifacts.ArtifactRefused("extract", "no code extracts from the text: nothing to load")
        if want.build_key != claim.build_key:
            raise artifacts.ArtifactRefused("key", f"the job was built under key {str(claim.build_key)[:16]}..., "
                                            f"this host derives {want.build_key[:16]}... (another toolchain or target)")
        if artifacts.installed(config, want.build_key, worker.target):
            event = "local"
        else:
            stored = store.get(worker.db, want.build_key)
            if stored is None:
                raise artifacts.ArtifactRefused("missing", "no artifact is stored under the job's key")
            if store.digest(stored.data) != claim.artifact_sha256:
                raise artifacts.ArtifactRefused("digest", "the stored artifact's bytes do not match the digest its "
                                                "builder recorded with the job")
            artifacts.install(stored.data, want, worker.target, config)
            event = "installed"
    except artifacts.ArtifactRefused as refused:
        event = f"refused_{refused.reason}"
        log.warning("job %s: artifact refused (%s): %s; building it here", claim.job_id, refused.reason, refused)
    except Exception:  # the database away, the build root unwritable: build it here, as without builders
        event = "refused_error"
        log.exception("job %s: loading its artifact failed; building it here", claim.job_id)
    worker.stats.artifact(event)
    return event
