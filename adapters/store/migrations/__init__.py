"""Alembic migrations of the slotward store."""
