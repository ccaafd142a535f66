"""Throwaway databases for migration tests: a SQLite file or a PostgreSQL database."""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest
from sqlalchemy import Engine, create_engine
from sqlalchemy.pool import NullPool

from tests.pgserver import PgServer

__all__ = ["empty_database"]

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
