"""jobs: what judging a job needs (a GPU, a kernel language); workers: what each can judge

Revision ID: 0012
Revises: 0011
Create Date: 2026-11-28

A CUDA candidate claimed by a worker without a GPU failed for the host's reason and was stored as the candidate's
verdict (runtime_error "CUDA_HOME ... not set"). A job now carries its needs (sandbox/needs.py), a worker claims
only jobs it can judge (service/queue/claims.py), and a worker's row says what it can judge, which the submission
route reads to refuse a submission no worker can judge. Existing jobs need nothing: they are claimed as before.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = '0012'
down_revision = '0011'
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("jobs") as batch:
        batch.add_column(sa.Column("needs_gpu", sa.Boolean(), nullable=False, server_default=sa.false()))
        batch.add_column(sa.Column("language", sa.String(32), nullable=True))
    with op.batch_alter_table("workers") as batch:
        batch.add_column(sa.Column("judges", sa.JSON(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("workers") as batch:
        batch.drop_column("judges")
    with op.batch_alter_table("jobs") as batch:
        batch.drop_column("language")
        batch.drop_column("needs_gpu")
