"""GET /v1/submissions/{id}/profile: the Nsight Compute profile its submitter asked for with `profile: true`."""

from __future__ import annotations

from fastapi import APIRouter, HTTPException, status

from service.api import schemas
from service.api.deps import OPTIONAL_KEY, ReadSessionDep, SettingsDep, ViewerDep
from service.api.errors import responses
from service.profiles import store
from service.visibility import can_see_diagnostics

router = APIRouter(prefix="/v1/submissions", tags=["submissions"])


@router.get("/{submission_id}/profile", response_model=schemas.ProfileOut, summary="The profile of a submission",
            openapi_extra=OPTIONAL_KEY, responses=responses(401, 404, 422, 503))
def read_profile(submission_id: str, viewer: ViewerDep, session: ReadSessionDep,
                 settings: SettingsDep) -> schemas.ProfileOut:
    """Per kernel: duration, DRAM throughput and its % of peak, SM throughput %, achieved occupancy, registers per
    thread, shared memory per block, grid and block, the top warp stall reasons; and the same as plain text for a
    prompt. Taken after the verdict on a GPU worker, only when the submission was sent with `profile: true`
    (404 otherwise); `pending` until then. Its status and timing are public, like the verdict's; the profile names
    the source's kernels, so `profile` and `text` are read only by whom may read the source (its submitter's keys,
    the admin key, anyone once it is public): for others they are null and `withheld` is true."""
    found = store.for_submission(session, submission_id)
    if found is None:
        raise HTTPException(status.HTTP_404_NOT_FOUND, f"no submission {submission_id!r}")
    sub, row = found
    if row is None:
        raise HTTPException(status.HTTP_404_NOT_FOUND, f"no profile was asked for submission {submission_id!r}: "
                            "send it with `profile: true` (kernel-judge submit --profile)")
    readable = can_see_diagnostics(sub, viewer, settings.sources_public_after)
    return schemas.ProfileOut(submission_id=sub.id, judged_submission_id=row.submission_id, status=row.status,
                              requested_at=row.requested_at, finished_at=row.finished_at, gpu_seconds=row.gpu_seconds,
                              profile=row.profile if readable else None, text=row.text if readable else None,
                              withheld=not readable)
