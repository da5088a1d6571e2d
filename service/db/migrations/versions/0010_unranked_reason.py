"""unranked reason: a correct verdict whose time is not ranked (issue 28, a card throttled during both timings)

Revision ID: 0010
Revises: 0009
Create Date: 2026-11-26

A copy of the verdict's `unranked_reason` (null when `ranked`), filled at insert by
`service.db.models.ranking_columns` like the other ranking columns (migration 0005), so the leaderboard lists such
a verdict apart without reading its JSON. Verdicts written before this revision were all ranked: nothing to fill.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = '0010'
down_revision = '0009'
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("verdicts") as batch:
        batch.add_column(sa.Column("unranked_reason", sa.String(300), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("verdicts") as batch:
        batch.drop_column("unranked_reason")
