"""Database: SQLAlchemy models, engine/session factory and Alembic migrations."""
