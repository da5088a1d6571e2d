"""rankable verdicts index: the leaderboard's per-request count without a scan of every verdict

Revision ID: 0007
Revises: 0006
Create Date: 2026-11-23

The leaderboard keeps each task's rankable verdicts in memory (service/rankable.py) and, on every request,
counts them (correct, timed, on a named GPU model) up to the largest id it holds, to learn whether a verdict
was added or committed late. A partial index on (task_id, status, id) over the timed verdicts turns that
count into an index-only scan. Partial indexes exist on both back ends (PostgreSQL and SQLite).
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = '0007'
down_revision = '0006'
branch_labels = None
depends_on = None

TIMED = "median_ms IS NOT NULL AND device_name IS NOT NULL"


def upgrade() -> None:
    op.create_index("ix_verdicts_rankable", "verdicts", ["task_id", "status", "id"],
                    postgresql_where=sa.text(TIMED), sqlite_where=sa.text(TIMED))


def downgrade() -> None:
    op.drop_index("ix_verdicts_rankable", table_name="verdicts")
