"""api bounds: BIGINT sample_index

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-23

`submissions.sample_index` was a 32-bit INTEGER on PostgreSQL, so an index of 2^31 or more failed the insert
(a 500). It becomes BIGINT, and the API refuses anything beyond 2^63 - 1 (schemas.MAX_SAMPLE_INDEX).
SQLite needs no change: its INTEGER already holds 64 bits, and rebuilding the table there (SQLite cannot
alter a column's type) would only risk the foreign keys that point at it.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = '0002'
down_revision = '0001'
branch_labels = None
depends_on = None


def upgrade() -> None:
    if op.get_bind().dialect.name == "sqlite":
        return
    with op.batch_alter_table('submissions') as batch_op:
        batch_op.alter_column('sample_index', existing_type=sa.Integer(), type_=sa.BigInteger(),
                              existing_nullable=True)


def downgrade() -> None:
    if op.get_bind().dialect.name == "sqlite":
        return
    # Fails (rather than truncating) if a stored index no longer fits 32 bits.
    with op.batch_alter_table('submissions') as batch_op:
        batch_op.alter_column('sample_index', existing_type=sa.BigInteger(), type_=sa.Integer(),
                              existing_nullable=True)
