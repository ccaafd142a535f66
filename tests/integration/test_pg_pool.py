"""The PostgreSQL store's connection pools on a real server: their size, and
connections the server closed being replaced without a failed call."""

from __future__ import annotations

import asyncio
import itertools
from datetime import timedelta

from slotward.adapters.store.postgres.store import PostgresStore
from tests.conftest import TEMPLATE
from tests.pgserver import PgServer

MAX_HOLD = timedelta(hours=24)
_NAMES = itertools.count(1)


def _backends(postgres: PgServer, database: str) -> int:
    query = f"SELECT count(*) FROM pg_stat_activity WHERE datname = '{database}'"
    return int(postgres.psql(query).strip())


async def _sleep_in_transaction(store: PostgresStore, seconds: float) -> None:
    await store.write(lambda uow: uow.keys.find("none"))  # a cheap statement
    await store.read(lambda uow: uow.keys.find("none"))
    await asyncio.sleep(seconds)


async def test_each_pool_opens_at_most_its_size(postgres: PgServer) -> None:
    name = f"pool{next(_NAMES)}"
    url = postgres.create_database(name, template=TEMPLATE)
    store = await PostgresStore.open(url, MAX_HOLD, pool_size=2)
    try:

        def slow(uow: object) -> None:
            # Keep the connection busy on the server side, so calls overlap.
            uow._db.sql("SELECT pg_sleep(0.05)")  # type: ignore[attr-defined]

        await asyncio.gather(*(store.write(slow) for _ in range(12)))
        await asyncio.gather(*(store.read(slow) for _ in range(12)))
        assert _backends(postgres, name) <= 4  # two pools of two
    finally:
        await store.close()


async def test_connections_the_server_closed_are_replaced_without_a_failed_call(
    postgres: PgServer,
) -> None:
    name = f"pool{next(_NAMES)}"
    url = postgres.create_database(name, template=TEMPLATE)
    store = await PostgresStore.open(url, MAX_HOLD, pool_size=3)
    try:
        await asyncio.gather(*(_sleep_in_transaction(store, 0) for _ in range(6)))
        assert _backends(postgres, name) >= 2  # pooled, idle
        postgres.psql(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
            f"WHERE datname = '{name}' AND pid <> pg_backend_pid()"
        )
        await asyncio.sleep(0.1)  # the closed sockets reach the event loop
        for _ in range(6):  # every pooled connection is dead: none is used
            assert await store.write(lambda uow: uow.keys.find("none")) is None
            assert await store.read(lambda uow: uow.keys.find("none")) is None
    finally:
        await store.close()
