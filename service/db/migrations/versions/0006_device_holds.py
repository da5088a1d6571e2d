"""device holds: which device each claim executed on, and from when to when

Revision ID: 0006
Revises: 0005
Create Date: 2026-11-23

`jobs.run_started_at` and `jobs.finished_at` say when a job's last claim ran, not on which device, and a
reclaim or a retry erases the earlier claim's times. The device-busy timeline (service.observability.timeline)
needs every interval in which a device was held, with the device named, so these columns go on the claim
record (`job_attempts`, one row per claim), written by the worker around `sandbox.execute`
(service.worker.holds). All nullable: claims that never reached a device, and rows from before this revision,
have none.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = '0006'
down_revision = '0005'
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("job_attempts") as batch:
        batch.add_column(sa.Column("device", sa.String(200), nullable=True))
        batch.add_column(sa.Column("execute_started_at", sa.DateTime(), nullable=True))
        batch.add_column(sa.Column("execute_ended_at", sa.DateTime(), nullable=True))
    # The timeline reads a window of holds ("what ran in the last hour"): without the index, a full scan of every
    # claim ever made.
    op.create_index("ix_job_attempts_execute_started_at", "job_attempts", ["execute_started_at"])


def downgrade() -> None:
    op.drop_index("ix_job_attempts_execute_started_at", table_name="job_attempts")
    with op.batch_alter_table("job_attempts") as batch:
        batch.drop_column("execute_ended_at")
        batch.drop_column("execute_started_at")
        batch.drop_column("device")
