"""Suite-wide fixtures: one throwaway PostgreSQL server for the whole run."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Iterator
from datetime import timedelta

import pytest
from hypothesis import settings

from slotward.adapters.store.postgres.store import PostgresStore
from tests.pgserver import PgServer, find_binaries, start_postgres

# `make test` is the same run every time: hypothesis draws from a fixed seed
# (a failure it finds is a bug either way, but it must not come and go).
# HYPOTHESIS_PROFILE=explore draws new examples, for a local search.
settings.register_profile("repeatable", derandomize=True)
settings.register_profile("explore", derandomize=False, max_examples=1000)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "repeatable"))


@pytest.fixture(scope="session")
def postgres() -> Iterator[PgServer]:
    """Started on first use, stopped at the end. Missing binaries skip the
    PostgreSQL half of the suite on a laptop, and fail it on CI (CI=true)."""
    if find_binaries() is None:
        if os.environ.get("CI") == "true":
            pytest.fail("CI=true but the PostgreSQL binaries (initdb, pg_ctl) are missing")
        pytest.skip("PostgreSQL binaries not installed")
    server = start_postgres()
    try:
        url = server.create_database(TEMPLATE)
        asyncio.run(_migrate(url))  # once: databases are copies of the migrated template
        server.create_database(SHARED, template=TEMPLATE)
        yield server
    finally:
        server.stop()


TEMPLATE = "slotward_template"  # migrated, empty, never used directly
SHARED = "slotward_tests"  # emptied before each test that uses it


async def _migrate(url: str) -> None:
    store = await PostgresStore.open(url, timedelta(hours=24))
    await store.close()
