"""A token bucket per API key, kept in the `api_keys` row so every API process shares it.

Each submission takes one token; tokens refill at `rate_limit_per_minute / 60` per second up to
`rate_limit_burst`. Spending is serialised per key (a row lock on PostgreSQL, the write lock on
SQLite) and the update is also a compare-and-set on `bucket_updated_at`, so two API processes
spending the same bucket at once cannot both use the last token.
"""

from __future__ import annotations

import math

from sqlalchemy import select, update

from service.db.models import ApiKey, utcnow
from service.db.session import Database


def take_token(db: Database, key_id: str, per_minute: float, burst: int) -> float:
    """Spend one token. Returns 0.0 on success, else the seconds until a token is available."""
    rate = per_minute / 60.0
    for _ in range(20):
        now = utcnow()
        with db.transaction() as session:
            query = select(ApiKey.bucket_tokens, ApiKey.bucket_updated_at).where(ApiKey.id == key_id)
            if not db.sqlite:
                query = query.with_for_update()  # PostgreSQL: spenders of one bucket queue on its row
            tokens, updated = session.execute(query).one()
            if tokens is None or updated is None:
                level = float(burst)
            else:
                level = min(float(burst), tokens + max(0.0, (now - updated).total_seconds()) * rate)
            if level < 1.0:
                return max(1.0, math.ceil((1.0 - level) / rate)) if rate > 0 else 3600.0
            guard = ApiKey.bucket_updated_at.is_(None) if updated is None else ApiKey.bucket_updated_at == updated
            result = session.execute(update(ApiKey).where(ApiKey.id == key_id, guard)
                                     .values(bucket_tokens=level - 1.0, bucket_updated_at=now))
            if result.rowcount == 1:
                return 0.0
    return 1.0  # heavy contention on one key: ask the client to come back shortly
