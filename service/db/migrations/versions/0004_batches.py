"""batches: batch table, batch_id on submissions, shared verdicts

Revision ID: 0004
Revises: 0003
Create Date: 2026-11-23

- `batches`: one row per JSONL upload or rewards call (service.batches).
- `submissions`: nullable batch columns (batch_id, line, duplicate_of, parent_id, turn, sample_metadata);
  every existing submission stays interactive (all null).
- `jobs.fair_key`: the claim order of batch jobs (service.batches.fairness); null, i.e. interactive, for
  existing jobs.

SQLite cannot add foreign keys to an existing table in place: `batch_alter_table` rebuilds `submissions`
there (a copy), and issues plain ALTER TABLE on PostgreSQL.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = '0004'
down_revision = '0003'
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "batches",
        sa.Column("id", sa.String(32), primary_key=True),
        sa.Column("name", sa.String(200), nullable=True),
        sa.Column("kind", sa.String(16), nullable=False),
        sa.Column("api_key_id", sa.String(32), sa.ForeignKey("api_keys.id", name="fk_batches_api_key_id"),
                  nullable=False),
        sa.Column("submitter", sa.String(100), nullable=False),
        sa.Column("tags", sa.JSON(), nullable=False),
        sa.Column("total", sa.Integer(), nullable=False),
        sa.Column("duplicates", sa.Integer(), nullable=False),
        sa.Column("rejected", sa.JSON(), nullable=False),
        sa.Column("created_at", sa.DateTime(), nullable=False),
        sa.Column("cancelled_at", sa.DateTime(), nullable=True),
    )
    op.create_index("ix_batches_key_created", "batches", ["api_key_id", "created_at"])
    with op.batch_alter_table("submissions") as batch_op:
        batch_op.add_column(sa.Column("batch_id", sa.String(32), nullable=True))
        batch_op.add_column(sa.Column("line", sa.Integer(), nullable=True))
        batch_op.add_column(sa.Column("duplicate_of", sa.String(32), nullable=True))
        batch_op.add_column(sa.Column("parent_id", sa.String(32), nullable=True))
        batch_op.add_column(sa.Column("turn", sa.Integer(), nullable=True))
        batch_op.add_column(sa.Column("sample_metadata", sa.JSON(), nullable=True))
        batch_op.create_foreign_key("fk_submissions_batch_id", "batches", ["batch_id"], ["id"])
        batch_op.create_foreign_key("fk_submissions_duplicate_of", "submissions", ["duplicate_of"], ["id"])
        batch_op.create_foreign_key("fk_submissions_parent_id", "submissions", ["parent_id"], ["id"])
        batch_op.create_index("ix_submissions_batch_line", ["batch_id", "line"])
    with op.batch_alter_table("jobs") as batch_op:
        batch_op.add_column(sa.Column("fair_key", sa.BigInteger(), nullable=True))
        batch_op.create_index("ix_jobs_fair", ["state", "fair_key"])


def downgrade() -> None:
    with op.batch_alter_table("jobs") as batch_op:
        batch_op.drop_index("ix_jobs_fair")
        batch_op.drop_column("fair_key")
    with op.batch_alter_table("submissions") as batch_op:
        batch_op.drop_index("ix_submissions_batch_line")
        batch_op.drop_constraint("fk_submissions_parent_id", type_="foreignkey")
        batch_op.drop_constraint("fk_submissions_duplicate_of", type_="foreignkey")
        batch_op.drop_constraint("fk_submissions_batch_id", type_="foreignkey")
        for column in ("sample_metadata", "turn", "parent_id", "duplicate_of", "line", "batch_id"):
            batch_op.drop_column(column)
    op.drop_index("ix_batches_key_created", table_name="batches")
    op.drop_table("batches")
