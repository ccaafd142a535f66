"""Alembic migration scripts, applied in order by adapters/store/migrate.py."""
