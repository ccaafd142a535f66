"""Fixtures shared by the integration tests."""

from collections.abc import AsyncIterator
from datetime import timedelta
from pathlib import Path

import pytest

from slotward.adapters.store.sqlite.store import SqliteStore
from slotward.engine.ports import Store
from tests.integration.databases import migrated_database, open_store
from tests.integration.radicale_fixtures import (  # noqa: F401  (fixtures, found by name)
    caldav_calendar,
    radicale,
    radicale_htpasswd,
)


@pytest.fixture(params=["sqlite", "postgres"])
def either_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A new database at the current schema: a SQLite file, then a PostgreSQL database."""
    return migrated_database(request, tmp_path, request.param, "either")


@pytest.fixture
async def either_store(either_url: str) -> AsyncIterator[Store]:
    """The store on :func:`either_url`, closed after the test."""
    opened = await open_store(either_url)
    yield opened
    await opened.close()


@pytest.fixture
def sqlite_file(tmp_path: Path) -> Path:
    """Where :func:`sqlite_store` keeps its database (for a second connection to it)."""
    return tmp_path / "store.db"


@pytest.fixture
async def sqlite_store(sqlite_file: Path) -> AsyncIterator[SqliteStore]:
    """A SQLite store on a new file at the current schema, closed after the test."""
    opened = SqliteStore.open(f"sqlite:///{sqlite_file}", timedelta(hours=24))
    try:
        yield opened
    finally:
        await opened.close()
