"""POST /v1/rewards: score a list of completions for an RL trainer, blocking until judged or a deadline.

The call stores the completions as a batch (kind "rewards"), so they are judged by the ordinary workers in
fair order and stay inspectable afterwards (GET /v1/batches/{batch_id}). While waiting, the request holds no
thread and no transaction: it waits on the event loop, woken when one of its verdicts is stored
(service/api/verdict_waits.py), and reads the database then or every `rewards_poll_s` at the latest. The reward
of each completion is `service.batches.rewards.reward` of its verdict summary.
"""

from __future__ import annotations

import time

from fastapi import APIRouter, HTTPException, Request, status
from fastapi.concurrency import run_in_threadpool
from pydantic import ValidationError

from sandbox.verdict import Status
from service.api.deps import CurrentKey, DatabaseDep, SettingsDep, VerdictWaitsDep
from service.api.openapi import inline_schema
from service.api.routes.batches import check_quota, read_body
from service.api.verdict_waits import wait_for_verdict
from service.batches import store
from service.batches.parse import Parsed, check_sample
from service.batches.rewards import RewardParams, VerdictSummary, reward
from service.batches.schemas import LineError, RewardItem, RewardsOut, RewardsRequest
from service.core.config import Settings
from service.core.ratelimit import lock_key
from service.db.models import ApiKey, Batch
from service.db.session import Database
from service.visibility import ADMIN

router = APIRouter(prefix="/v1/rewards", tags=["rewards"])


_REQUEST_BODY = {"required": True,
                 "content": {"application/json": {"schema": inline_schema(RewardsRequest)}}}


def _parse(body: bytes, settings: Settings) -> tuple[RewardsRequest, Parsed]:
    try:
        request = RewardsRequest.model_validate_json(body)
    except ValidationError as exc:
        errors = exc.errors(include_url=False, include_context=False, include_input=False)
        first = errors[0]
        message = f"invalid rewards request: {'.'.join(map(str, first['loc']))}: {first['msg']}"
        raise HTTPException(status.HTTP_422_UNPROCESSABLE_CONTENT, {"message": message, "errors": errors}) from None
    if len(request.completions) > settings.max_batch_samples:
        raise HTTPException(status.HTTP_413_CONTENT_TOO_LARGE,
                            f"{len(request.completions)} completions; the limit is {settings.max_batch_samples} "
                            "(JUDGE_MAX_BATCH_SAMPLES)")
    defaults = {"task": request.task, "model": request.model}
    parsed = Parsed(name=request.name)
    for index, item in enumerate(request.completions):
        try:
            sample = check_sample(item, settings.max_source_bytes, defaults)
            parsed.accept(index + 1, sample.model_copy(update={"sample_index": sample.sample_index
                                                                      if sample.sample_index is not None
                                                                      else index}))
        except ValueError as exc:
            parsed.rejected.append(LineError(line=index + 1, error=str(exc)))
    return request, parsed


def _admit(db: Database, settings: Settings, key: ApiKey, parsed: Parsed) -> store.Created | None:
    """Store the accepted items as a "rewards" batch; None when every item was refused (each gets `refused`)."""
    try:
        with db.transaction() as session:
            lock_key(session, key.id)  # the quota counts one request of this key at a time
            check_quota(session, key, len(parsed.samples), settings)
            return store.create_batch(session, key, parsed.samples, name=parsed.name, tags=[], kind="rewards",
                                      rejected=parsed.rejected, codes=parsed.codes)
    except store.NoSamples as exc:
        parsed.rejected = exc.rejected
        return None


def _results(db: Database, created: store.Created | None, request: RewardsRequest,
             parsed: Parsed) -> tuple[list[RewardItem], bool]:
    params: RewardParams = request.reward
    rows = {}
    if created is not None:
        with db.transaction(read_only=True) as session:
            after = 0
            while True:
                # the caller's own batch, just made with its key: it reads every diagnosis
                page = store.results_page(session, created.batch.id, after, 1000, viewer=ADMIN,
                                          public_after=None)
                rows.update({r.line: r for r in page})
                if len(page) < 1000:
                    break
                after = page[-1].line
    admitted = {s.line: s for s in created.samples} if created else {}
    refused = {r.line: r.error for r in (created.rejected if created else parsed.rejected)}
    items, complete = [], True
    for index in range(len(request.completions)):
        line = index + 1
        if line in refused:
            items.append(RewardItem(index=index, submission_id=None, status=None, reward=params.refused,
                                    terms={"refused": params.refused}, speedup_eager=None, speedup_compile=None,
                                    duplicate_of=None, diagnosis=refused[line]))
            continue
        row = rows[line]
        summary = VerdictSummary(status=Status(row.status) if row.status is not None else None,
                                 format_ok=admitted[line].code.extracted, compiled=bool(row.compiled),
                                 speedup_eager=row.speedup_eager, speedup_compile=row.speedup_compile)
        complete &= row.status is not None
        value = reward(summary, params)
        items.append(RewardItem(index=index, submission_id=row.submission_id, status=row.status, reward=value.value,
                                terms=value.terms, speedup_eager=row.speedup_eager,
                                speedup_compile=row.speedup_compile, duplicate_of=row.duplicate_of,
                                diagnosis=row.diagnosis))
    return items, complete


def _open(db: Database, batch_id: str) -> int:
    with db.transaction(read_only=True) as session:
        return store.open_jobs(session, batch_id)


def _cancel(db: Database, batch_id: str) -> None:
    with db.transaction() as session:
        store.cancel_batch(session, session.get(Batch, batch_id))


@router.post(
    "",
    response_model=RewardsOut,
    summary="Rewards for a list of completions (blocks until judged or the deadline)",
    openapi_extra={"requestBody": _REQUEST_BODY},
    responses={401: {"description": "No or unknown API key."},
               413: {"description": "Body or item count over the batch limits."},
               422: {"description": "Malformed request (individual bad items are not fatal: they get `refused`)."},
               429: {"description": "Batch queue quota exceeded; see Retry-After."}},
)
async def create_rewards(http: Request, key: CurrentKey, db: DatabaseDep, settings: SettingsDep,
                         waits: VerdictWaitsDep) -> RewardsOut:
    """For a reward function in TRL, veRL or OpenRLHF: send the group's completions (strings, with `task` as the
    default task, or sample objects), get one scalar reward per completion, in order, with its terms and
    verdict summary. Waits until every completion is judged or `deadline_s` passes (`complete: false`, and
    the unfinished ones get `reward.unfinished`, null by default). The formula and its defaults (Kevin-32B's
    0.3 + speedup) are documented in service.batches.rewards; override any parameter in `reward`."""
    started = time.monotonic()
    body = await read_body(http, settings.max_batch_bytes)
    request, parsed = await run_in_threadpool(_parse, body, settings)
    created = await run_in_threadpool(_admit, db, settings, key, parsed) if parsed.samples else None
    deadline = started + min(request.deadline_s, settings.rewards_max_wait_s)
    while created is not None and time.monotonic() < deadline:
        if not await run_in_threadpool(_open, db, created.batch.id):
            break
        if await http.is_disconnected():
            break
        await wait_for_verdict(waits, [f"b:{created.batch.id}"],
                               min(settings.rewards_poll_s, max(0.0, deadline - time.monotonic())))
    items, complete = await run_in_threadpool(_results, db, created, request, parsed)
    if not complete and request.cancel_unfinished and created is not None:
        await run_in_threadpool(_cancel, db, created.batch.id)
    return RewardsOut(batch_id=created.batch.id if created else None, complete=complete,
                      elapsed_s=round(time.monotonic() - started, 3), results=items)
