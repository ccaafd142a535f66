"""Throwaway databases for migration tests: a SQLite file or a PostgreSQL database,
and moving one to a revision."""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest
from alembic import command
from alembic.config import Config as AlembicConfig
from sqlalchemy import Engine, create_engine
from sqlalchemy.pool import NullPool

from slotward.adapters.store import migrate
from tests.pgserver import PgServer

__all__ = ["empty_database", "migrate_to"]

_NAMES = itertools.count(1)


def empty_database(
    request: pytest.FixtureRequest, tmp_path: Path, kind: str, name: str
) -> tuple[str, Engine]:
    """The server's URL of a new empty database of ``kind``, and a synchronous engine on it."""
    if kind == "sqlite":
        url, sync_url = f"sqlite+aiosqlite:///{tmp_path}/old.db", f"sqlite:///{tmp_path}/old.db"
    else:
        pg: PgServer = request.getfixturevalue("postgres")
        url = pg.create_database(f"{name}_{next(_NAMES)}")
        sync_url = url.replace("+asyncpg", "+psycopg")
    return url, create_engine(sync_url, poolclass=NullPool)


def migrate_to(db: Engine, target: str, *, down: bool = False) -> None:
    """Upgrade ``db`` to revision ``target`` as the store does, or downgrade it."""
    with db.begin() as conn:
        if not down:
            migrate.upgrade(conn, target)
            return
        config = AlembicConfig()
        config.set_main_option("script_location", str(Path(migrate.__file__).parent / "migrations"))
        config.attributes["connection"] = conn
        command.downgrade(config, target)
