"""Throwaway databases: a SQLite file or a PostgreSQL database, empty (for migration
tests, with moving one to a revision) or migrated, with a store open on it."""

from __future__ import annotations

import itertools
from datetime import timedelta
from pathlib import Path

import pytest
from alembic import command
from alembic.config import Config as AlembicConfig
from sqlalchemy import Engine, create_engine
from sqlalchemy.pool import NullPool

from slotward.adapters.store import migrate
from slotward.adapters.store.postgres.store import PostgresStore
from slotward.adapters.store.sqlite.store import SqliteStore
from slotward.engine.ports import Store
from tests.conftest import TEMPLATE
from tests.pgserver import PgServer

__all__ = ["empty_database", "migrate_to", "migrated_database", "open_store"]

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


def migrated_database(request: pytest.FixtureRequest, tmp_path: Path, kind: str, name: str) -> str:
    """The URL of a new database of ``kind`` at the current schema (PostgreSQL's from
    the session's migrated template; a SQLite file is migrated when a store opens it)."""
    if kind == "sqlite":
        return f"sqlite:///{tmp_path / name}.db"
    pg: PgServer = request.getfixturevalue("postgres")
    return pg.create_database(f"{name}{next(_NAMES)}", template=TEMPLATE)


async def open_store(url: str, retention: timedelta = timedelta(hours=24)) -> Store:
    """The store on ``url``, as the server opens it."""
    if url.startswith("sqlite"):
        return SqliteStore.open(url, retention)
    return await PostgresStore.open(url, retention)
