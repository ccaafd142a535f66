"""A duplicate waiting (``wait_ms``) is woken by the completion, not by polling the store.

In one process the completing request wakes its waiters; across processes on
PostgreSQL a NOTIFY does. The store is read again only on a slow fallback
timer (``wait_poll_seconds``): these tests count the reads a waiter makes, or
make the fallback longer than the wait so that only a signal can answer it.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable
from typing import Any, TypeVar

import asyncpg  # type: ignore[import-untyped]
import pytest
from sqlalchemy.engine import make_url

from slotward.adapters.store.postgres.notify import CHANNEL, PgSignals
from slotward.api.bootstrap import bootstrap, open_store
from slotward.api.config import Config
from slotward.api.http.app import build_app
from slotward.engine.errors import ConfigError
from slotward.engine.ports import Store, UnitOfWork
from tests.e2e.conftest import Client, Server, serving, until
from tests.e2e.test_executions import acquire, call, complete

T = TypeVar("T")

SLOW_POLL: dict[str, Any] = {"wait_poll_seconds": 300}  # longer than any wait below
# Waiting across processes: the waiter would take a last look at the store when
# its wait_ms ends (and, with FixedClock, its lease never ends), so an answer
# within half of it can only come from a signal.
LONG_WAIT = 30000
SIGNALLED_WITHIN = 15


class CountingStore:
    """The real store, counting the reads made through it."""

    def __init__(self, inner: Store) -> None:
        self.inner = inner
        self.reads = 0

    async def write(self, fn: Callable[[UnitOfWork], T]) -> T:
        return await self.inner.write(fn)

    async def read(self, fn: Callable[[UnitOfWork], T]) -> T:
        self.reads += 1
        return await self.inner.read(fn)

    async def close(self) -> None:
        await self.inner.close()


@pytest.fixture
def store_wrapper() -> Callable[[Store], Store]:
    return CountingStore


def counted(store: Store) -> CountingStore:
    assert isinstance(store, CountingStore)
    return store


def signals(server: Server) -> PgSignals:
    found = server.services.completions.signals
    assert isinstance(found, PgSignals)
    return found


async def test_a_waiter_is_answered_by_the_completion_without_polling(server: Server) -> None:
    agent = await server.key()
    first = await acquire(agent)  # its key is verified and cached: no read for it later
    store = counted(server.services.store)
    before = store.reads
    waiting = asyncio.create_task(acquire(agent, call(wait_ms=20000)))
    await until(lambda: store.reads > before)  # it has looked once, and waits
    await asyncio.sleep(3)  # a poll ten times a second would read some 30 times meanwhile
    during = store.reads - before
    done = await complete(agent, first.key, first.json["lease_token"], result="sent")
    answer = await waiting
    assert (answer.status, answer.replayed, answer.body) == (200, True, done.body)
    assert during <= 8  # the first look, then the fallback's, about once a second
    assert len(server.services.completions) == 0


async def test_the_fallback_reads_once_for_all_waiters_not_once_each(server: Server) -> None:
    agent = await server.key()
    steps = range(1, 21)
    leases = [await acquire(agent, call(step=step)) for step in steps]
    store = counted(server.services.store)
    before = store.reads
    waiting = [asyncio.create_task(acquire(agent, call(step=s, wait_ms=20000))) for s in steps]
    await until(lambda: store.reads >= before + len(steps))  # each has looked once
    await asyncio.sleep(3)  # a look each per second would be 60 reads meanwhile
    during = store.reads - before - len(steps)
    for first in leases:
        await complete(agent, first.key, first.json["lease_token"], result="sent")
    answers = await asyncio.gather(*waiting)
    assert {(a.status, a.replayed) for a in answers} == {(200, True)}
    assert during <= 10  # the process's fallback look, about once a second


@contextlib.asynccontextmanager
async def other_instance(server: Server, url: str) -> AsyncIterator[tuple[Server, str]]:
    """A second app on the same database, with a store of its own: another process."""
    config = Config(db_url=url, **SLOW_POLL)
    store = CountingStore(await open_store(config))
    other = await bootstrap(config, store=store, clock=server.clock)
    async with serving(build_app(other, config, sweep=False)) as base:
        there = Server(other, server.clock, server.db, base, server.session)
        await until(lambda: signals(server).backend_pid is not None)
        await until(lambda: signals(there).backend_pid is not None)
        yield there, base


async def _woken_from_elsewhere(server: Server, here: Client, there: Client, step: int) -> None:
    """``there`` completes while ``here`` waits: the answer arrives, after one look more."""
    first = await acquire(there, call(step=step))
    store = counted(server.services.store)
    before = store.reads
    waiting = asyncio.create_task(acquire(here, call(step=step, wait_ms=LONG_WAIT)))
    await until(lambda: store.reads > before)
    await asyncio.sleep(1)  # a poll ten times a second would read some 10 times meanwhile
    done = await complete(there, first.key, first.json["lease_token"], result=f"sent {step}")
    answer = await asyncio.wait_for(waiting, SIGNALLED_WITHIN)
    assert (answer.status, answer.replayed, answer.body) == (200, True, done.body)
    # The key's read, the first look, the look after the signal; and room for one
    # spurious wake (a listener reconnecting wakes its waiters once). A poll ten
    # times a second would have read at least ten times during the sleep alone.
    assert store.reads - before <= 5


@pytest.mark.parametrize("database", ["postgres"], indirect=True)
@pytest.mark.parametrize("config_overrides", [SLOW_POLL])
async def test_a_completion_in_another_process_wakes_the_waiter(
    server: Server, database: tuple[str, Any]
) -> None:
    async with other_instance(server, database[0]) as (_, base):
        agent = await server.key()
        there = Client(server.session, base, agent.secret)
        await _woken_from_elsewhere(server, agent, there, step=1)


@pytest.mark.parametrize("database", ["postgres"], indirect=True)
@pytest.mark.parametrize("config_overrides", [SLOW_POLL])
async def test_after_the_listener_is_killed_waiters_are_answered_and_it_reconnects(
    server: Server, database: tuple[str, Any]
) -> None:
    """Signals sent while the listener was down are lost: on reconnecting it wakes
    every waiter of its process to look again (the fallback poll covers a
    listener that stays down), then signals arrive as before."""
    async with other_instance(server, database[0]) as (_, base):
        agent = await server.key()
        there = Client(server.session, base, agent.secret)
        listener = signals(server)
        killed = listener.backend_pid
        first = await acquire(there)
        waiting = asyncio.create_task(acquire(agent, call(wait_ms=LONG_WAIT)))
        await until(lambda: len(server.services.completions) == 1)
        assert server.sql("SELECT pg_terminate_backend(?)", killed) == [(True,)]
        done = await complete(there, first.key, first.json["lease_token"], result="sent")
        answer = await asyncio.wait_for(waiting, SIGNALLED_WITHIN)
        assert (answer.status, answer.replayed, answer.body) == (200, True, done.body)
        await until(lambda: listener.backend_pid not in (None, killed))
        assert listener.connects == 2
        await _woken_from_elsewhere(server, agent, there, step=2)


@pytest.mark.parametrize("database", ["postgres"], indirect=True)
async def test_the_notification_names_no_tenant_and_no_key(
    server: Server, database: tuple[str, Any]
) -> None:
    """Any role that may connect may LISTEN: what it hears is a fixed-size digest."""
    url = make_url(database[0])
    heard: asyncio.Queue[str] = asyncio.Queue()
    spy = await asyncpg.connect(host=url.host, port=url.port, user=url.username,
                                database=url.database)  # fmt: skip
    try:
        await spy.add_listener(CHANNEL, lambda *args: heard.put_nowait(args[3]))
        agent = await server.key(tenant="acme-secret-tenant")
        key = {"Idempotency-Key": "order-4711-for-ana"}
        first = await acquire(agent, headers=key)
        await complete(agent, first.key, first.json["lease_token"], result="sent")
        payload = await asyncio.wait_for(heard.get(), 10)
    finally:
        await spy.close()
    assert len(payload) == 32
    assert set(payload) <= set("0123456789abcdef")  # a digest: no tenant, no key in clear


def test_the_fallback_interval_is_read_and_bounded() -> None:
    assert Config.from_env({}).wait_poll_seconds == 1.0
    assert Config.from_env({"SLOTWARD_WAIT_POLL_SECONDS": "2.5"}).wait_poll_seconds == 2.5
    for bad in ("0.01", "301", "0", "often"):
        with pytest.raises(ConfigError) as refused:
            Config.from_env({"SLOTWARD_WAIT_POLL_SECONDS": bad}).policy()
        assert refused.value.code == "invalid_config"
