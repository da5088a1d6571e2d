"""profiles: Nsight Compute profiles asked for with a submission (issue 28)

Revision ID: 0009
Revises: 0008
Create Date: 2026-11-26

One row per judged submission whose submitter sent `profile: true`: pending until a worker has judged it, then
the profile (or why there is none) and the device seconds it took, kept apart from the verdict, which it never
changes.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = '0009'
down_revision = '0008'
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "profiles",
        sa.Column("id", sa.Integer(), primary_key=True, autoincrement=True),
        sa.Column("submission_id", sa.String(32), sa.ForeignKey("submissions.id"), nullable=False, unique=True),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("requested_at", sa.DateTime(), nullable=False),
        sa.Column("finished_at", sa.DateTime(), nullable=True),
        sa.Column("worker_id", sa.String(200), nullable=True),
        sa.Column("gpu_seconds", sa.Float(), nullable=True),
        sa.Column("profile", sa.JSON(), nullable=True),
        sa.Column("text", sa.Text(), nullable=True),
    )


def downgrade() -> None:
    op.drop_table("profiles")
