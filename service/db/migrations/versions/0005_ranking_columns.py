"""ranking columns: what the leaderboard ranks on, copied out of the verdict JSON

Revision ID: 0005
Revises: 0004
Create Date: 2026-11-23

The leaderboard ranks thousands of verdicts per request. Reading the interval, the isolation and the
extra-shape results out of each verdict's JSON would cost a JSON parse per row (~5 KB each, thousands of
rows per ranking) inside the database or in Python; these columns are filled at insert
(`service.db.models.ranking_columns`) and backfilled here for existing rows.

No new index: on PostgreSQL the ranking query reads every correct verdict of the task (half the table in
scripts/bench/bench_pages.py), where a sequential scan beats any index; EXPLAIN ANALYZE showed an index on
(task_id, status, device_name, source_sha256, created_at) unused. The cache in service/ranking.py is what
keeps pages fast.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = '0005'
down_revision = '0004'
branch_labels = None
depends_on = None

COLUMNS = {
    "source_sha256": sa.String(64),
    "isolation": sa.String(100),
    "q25_ms": sa.Float(),
    "q75_ms": sa.Float(),
    "extra_passed": sa.Integer(),
    "extra_total": sa.Integer(),
    "peak_memory_bytes": sa.BigInteger(),
    "reference_peak_memory_bytes": sa.BigInteger(),
}


def upgrade() -> None:
    from service.db.models import ranking_columns

    with op.batch_alter_table("verdicts") as batch:
        for name, type_ in COLUMNS.items():
            batch.add_column(sa.Column(name, type_, nullable=True))

    # Backfill rows written before this revision, in pages so memory stays flat on a large table.
    verdicts = sa.table("verdicts", sa.column("id", sa.Integer), sa.column("verdict", sa.JSON),
                        *(sa.column(name, type_) for name, type_ in COLUMNS.items()))
    conn = op.get_bind()
    last = 0
    while True:
        rows = conn.execute(sa.select(verdicts.c.id, verdicts.c.verdict).where(verdicts.c.id > last)
                            .order_by(verdicts.c.id).limit(1000)).all()
        if not rows:
            break
        for row_id, verdict in rows:
            values = {k: v for k, v in ranking_columns(verdict or {}).items() if k in COLUMNS}  # later ones: theirs
            conn.execute(verdicts.update().where(verdicts.c.id == row_id).values(**values))
        last = rows[-1][0]


def downgrade() -> None:
    with op.batch_alter_table("verdicts") as batch:
        for name in COLUMNS:
            batch.drop_column(name)
