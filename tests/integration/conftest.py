"""Fixtures shared by the integration tests."""

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

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
