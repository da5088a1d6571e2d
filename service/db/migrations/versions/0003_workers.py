"""workers table: heartbeats and current jobs

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-23

One row per worker process, refreshed by its heartbeat (service.worker.registry): the admin listing
(GET /v1/admin/workers) and the cross-host metrics (/metrics sums `stats`) read it.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = '0003'
down_revision = '0002'
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "workers",
        sa.Column("id", sa.String(200), primary_key=True),
        sa.Column("host", sa.String(200), nullable=False),
        sa.Column("pid", sa.Integer(), nullable=False),
        sa.Column("devices", sa.JSON(), nullable=False),
        sa.Column("judge_mode", sa.String(32), nullable=False),
        sa.Column("started_at", sa.DateTime(), nullable=False),
        sa.Column("last_seen_at", sa.DateTime(), nullable=False),
        sa.Column("stopped_at", sa.DateTime(), nullable=True),
        sa.Column("current_jobs", sa.JSON(), nullable=False),
        sa.Column("stats", sa.JSON(), nullable=False),
    )
    op.create_index("ix_workers_last_seen_at", "workers", ["last_seen_at"])


def downgrade() -> None:
    op.drop_index("ix_workers_last_seen_at", table_name="workers")
    op.drop_table("workers")
