"""Apply the Alembic migrations programmatically (no alembic.ini needed)."""

from __future__ import annotations

from pathlib import Path

from alembic import command
from alembic.config import Config
from sqlalchemy import Connection

__all__ = ["upgrade"]

_SCRIPTS = Path(__file__).resolve().parent / "migrations"


def upgrade(connection: Connection, revision: str = "head") -> None:
    """Bring the schema on ``connection`` up to ``revision``."""
    config = Config()
    config.set_main_option("script_location", str(_SCRIPTS))
    config.attributes["connection"] = connection
    command.upgrade(config, revision)
