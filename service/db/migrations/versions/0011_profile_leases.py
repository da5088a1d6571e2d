"""profiles: a lease and an attempt count, so a profile whose worker stopped is taken up by another

Revision ID: 0011
Revises: 0010
Create Date: 2026-11-26

A profile is taken after its verdict is stored; a worker that stopped or died between the two left it pending
for ever. A worker now takes the profile's lease before profiling (`lease_until`), an idle worker takes up one
whose lease ran out or that nobody took (service/profiles/recovery.py), and `attempts` bounds how often.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = '0011'
down_revision = '0010'
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("profiles") as batch:
        batch.add_column(sa.Column("lease_until", sa.DateTime(), nullable=True))
        batch.add_column(sa.Column("attempts", sa.Integer(), nullable=False, server_default="0"))


def downgrade() -> None:
    with op.batch_alter_table("profiles") as batch:
        batch.drop_column("attempts")
        batch.drop_column("lease_until")
