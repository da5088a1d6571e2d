"""public sources: a submission's `public` flag

Revision ID: 0008
Revises: 0007
Create Date: 2026-11-24

A source is private to its submitter unless they make it public (service/visibility.py). The flag defaults to
false on the server, so every existing submission stays private and a writer that does not name the column
(bulk inserts of batch samples) stores a private one.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = '0008'
down_revision = '0007'
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("submissions") as batch_op:
        batch_op.add_column(sa.Column("public", sa.Boolean(), nullable=False, server_default=sa.false()))


def downgrade() -> None:
    with op.batch_alter_table("submissions") as batch_op:
        batch_op.drop_column("public")
