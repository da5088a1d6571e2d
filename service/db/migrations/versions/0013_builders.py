"""builder workers: jobs carry the artifact their builder published; artifacts are stored; workers say their role

Revision ID: 0013
Revises: 0012
Create Date: 2026-11-28

Builds move off the GPU hosts (issue 43): a builder worker compiles a job and publishes the build directory as an
artifact (`artifacts`, content-addressed by the build key), recording its digest on the job
(`jobs.artifact_sha256`, which also puts the job in the run stage); a run worker loads it after checking it. A
worker's row says its role (`workers.role`), so run workers know whether a builder is alive. Existing jobs have no
artifact: they are in the build stage, claimed as before.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = '0013'
down_revision = '0012'
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("jobs") as batch:
        batch.add_column(sa.Column("artifact_sha256", sa.String(64), nullable=True))
    with op.batch_alter_table("workers") as batch:
        batch.add_column(sa.Column("role", sa.String(16), nullable=True))
    op.create_table(
        "artifacts",
        sa.Column("build_key", sa.String(64), primary_key=True),
        sa.Column("sha256", sa.String(64), nullable=False),
        sa.Column("size", sa.BigInteger(), nullable=False),
        sa.Column("data", sa.LargeBinary(), nullable=False),
        sa.Column("builder", sa.String(200), nullable=True),
        sa.Column("created_at", sa.DateTime(), nullable=False),
    )


def downgrade() -> None:
    op.drop_table("artifacts")
    with op.batch_alter_table("workers") as batch:
        batch.drop_column("role")
    with op.batch_alter_table("jobs") as batch:
        batch.drop_column("artifact_sha256")
