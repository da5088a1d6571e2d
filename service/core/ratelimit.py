"""A token bucket per API key, kept in the `api_keys` row so every API process shares it.

Each submission takes one token; tokens refill at `rate_limit_per_minute / 60` per second up to
`rate_limit_burst`. Spending is serialised per key: the caller's write transaction holds the key's row
(`lock_key`: a row lock on PostgreSQL; SQLite's write transactions begin IMMEDIATE, so they hold the database's
write lock from their first statement). The clock is read only once the lock is held, and never runs
backwards: a spender that read `now` before waiting for the lock would find the bucket updated after its `now`,
refill nothing, then write its older time back, so the next spender would refill the same interval again
(one key, 600 POSTs at concurrency 60: 600 admitted where the bucket allows 328).
"""

from __future__ import annotations

import math

from sqlalchemy import select, update
from sqlalchemy.orm import Session

from service.db.models import ApiKey, utcnow
from service.db.session import Database


def lock_key(session: Session, key_id: str) -> ApiKey:
    """Hold the key's row until the caller's transaction ends: its bucket and its quotas are then read and
    changed by one request at a time, from every API process. FOR NO KEY UPDATE (PostgreSQL) leaves the
    foreign-key checks of other inserts for this key free; SQLite is already serialised by its write lock."""
    return session.execute(select(ApiKey).where(ApiKey.id == key_id).with_for_update(key_share=True)
                           .execution_options(populate_existing=True)).scalar_one()


def spend_token(session: Session, key: ApiKey, per_minute: float, burst: int) -> float:
    """Spend one token of `key`, whose row the caller holds (lock_key). Returns 0.0 on success, else the seconds
    until a token is available (nothing is written then)."""
    rate = per_minute / 60.0
    now = utcnow()
    updated = key.bucket_updated_at
    if updated is not None and now < updated:
        now = updated  # another process's clock is ahead: wait for it rather than refill its interval twice
    if key.bucket_tokens is None or updated is None:
        level = float(burst)
    else:
        level = min(float(burst), key.bucket_tokens + (now - updated).total_seconds() * rate)
    if level < 1.0:
        return max(1.0, math.ceil((1.0 - level) / rate)) if rate > 0 else 3600.0
    session.execute(update(ApiKey).where(ApiKey.id == key.id).values(bucket_tokens=level - 1.0, bucket_updated_at=now)
                    .execution_options(synchronize_session=False))
    return 0.0


def take_token(db: Database, key_id: str, per_minute: float, burst: int) -> float:
    """Spend one token in a transaction of its own (see spend_token)."""
    with db.transaction() as session:
        return spend_token(session, lock_key(session, key_id), per_minute, burst)
