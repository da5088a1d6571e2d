"""Alembic environment: the URL comes from `service.db.migrate` (config.attributes["url"])."""

from __future__ import annotations

from alembic import context
from sqlalchemy import create_engine, text

from service.db.models import Base

MIGRATION_LOCK = 7_245_001
"""PostgreSQL advisory-lock id held while migrating, so an API and workers starting together take turns."""


def run_migrations_online() -> None:
    url = context.config.attributes.get("url")
    engine = create_engine(url)
    sqlite = url.startswith("sqlite")
    with engine.connect() as connection:
        if not sqlite:
            connection.execute(text("SELECT pg_advisory_lock(:k)"), {"k": MIGRATION_LOCK})
            connection.commit()
        try:
            context.configure(connection=connection, target_metadata=Base.metadata, render_as_batch=sqlite)
            with context.begin_transaction():
                context.run_migrations()
        finally:
            if not sqlite:
                connection.execute(text("SELECT pg_advisory_unlock(:k)"), {"k": MIGRATION_LOCK})
                connection.commit()
    engine.dispose()


if context.is_offline_mode():
    raise SystemExit("offline migrations are not supported; use `kernel-judge migrate`")
run_migrations_online()
