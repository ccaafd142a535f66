"""Provider workers side by side on PostgreSQL: claims of bindings and of writes are
disjoint, one never committed is free, and racing stores of a read or of a write
end with one winner and the newest state.

Each worker is a unit of work of the SQL store on a connection of its own
(psycopg, SQLAlchemy's runner: the asyncpg one is the contract suite's), left
open while the other works, as two server processes would be.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import replace

import pytest
from sqlalchemy import Engine, create_engine, text
from sqlalchemy.pool import NullPool

from slotward.adapters.store.repos import SqlUnitOfWork
from tests.conftest import TEMPLATE
from tests.contract.calendar_values import binding, write
from tests.contract.values import MAX_HOLD, NOW, at
from tests.pgserver import PgServer

COUNT = 6
_NAMES = itertools.count(1)


@pytest.fixture
def engine(postgres: PgServer) -> Iterator[Engine]:
    url = postgres.create_database(f"calendar_claims_{next(_NAMES)}", template=TEMPLATE)
    made = create_engine(url.replace("+asyncpg", "+psycopg"), poolclass=NullPool)
    with made.connect() as conn:
        uow = SqlUnitOfWork(conn, MAX_HOLD, begin=None)
        with uow:
            for n in range(COUNT):
                uow.calendars.put(binding(f"att_{n}"))
            uow.calendar_writes.enqueue([write(f"hold_{n}") for n in range(COUNT)])
            uow.commit()
    yield made
    made.dispose()


@contextmanager
def worker(engine: Engine) -> Iterator[SqlUnitOfWork]:
    """A unit of work entered on a connection of its own, not committed."""
    with engine.connect() as conn:
        uow = SqlUnitOfWork(conn, MAX_HOLD, begin=None)
        with uow:
            # A claim that waited for another's lock would fail here, not hang.
            conn.execute(text("SET LOCAL lock_timeout = '2s'"))
            yield uow


def bindings(uow: SqlUnitOfWork, owner: str, limit: int = COUNT) -> list[str]:
    return sorted(b.attendee for b in uow.calendars.claim_due(owner, NOW, at(5), limit))


def writes(uow: SqlUnitOfWork, owner: str, limit: int = COUNT) -> list[str]:
    return sorted(w.hold_id for w in uow.calendar_writes.claim(owner, NOW, at(5), limit))


def test_two_sync_workers_claiming_at_once_get_disjoint_bindings(engine: Engine) -> None:
    with worker(engine) as a, worker(engine) as b:
        first = bindings(a, "sync-a", limit=4)
        second = bindings(b, "sync-b")  # does not wait for a: its rows are skipped
        assert len(first) == 4
        assert len(second) == COUNT - 4
        assert not set(first) & set(second)
        a.commit()
        b.commit()
    with worker(engine) as c:
        assert bindings(c, "sync-c") == []  # every claim is live


def test_two_writers_claiming_at_once_get_disjoint_writes(engine: Engine) -> None:
    with worker(engine) as a, worker(engine) as b:
        first = writes(a, "writer-a", limit=4)
        second = writes(b, "writer-b")
        assert len(first) == 4
        assert len(second) == COUNT - 4
        assert not set(first) & set(second)
        a.commit()
        b.commit()
    with worker(engine) as c:
        assert writes(c, "writer-c") == []


def test_claims_rolled_back_are_claimed_again(engine: Engine) -> None:
    with worker(engine) as a:
        assert len(bindings(a, "sync-a")) == COUNT
        assert len(writes(a, "writer-a")) == COUNT
    with worker(engine) as b:
        assert len(bindings(b, "sync-b")) == COUNT
        assert len(writes(b, "writer-b")) == COUNT


def test_two_reads_storing_from_one_version_have_one_winner(engine: Engine) -> None:
    def store(cursor: str) -> bool:
        with worker(engine) as uow:
            read = replace(binding("att_0"), status="ok", cursor=cursor, version=1)
            stored = uow.calendars.store_sync(read, 0)
            uow.commit()
            return stored

    with worker(engine) as first, ThreadPoolExecutor(1) as pool:
        won = first.calendars.store_sync(replace(binding("att_0"), cursor="first", version=1), 0)
        late = pool.submit(store, "second")  # waits on the row, then finds version 1
        first.commit()
        assert (won, late.result(timeout=10)) == (True, False)
    with worker(engine) as uow:
        found = uow.calendars.get("acme", "att_0")
        assert found is not None
        assert (found.cursor, found.version) == ("first", 1)


def test_an_older_write_enqueued_beside_a_newer_one_never_replaces_it(engine: Engine) -> None:
    def enqueue(version: int) -> None:
        with worker(engine) as uow:
            uow.calendar_writes.enqueue([write("hold_9", version=version)])
            uow.commit()

    with worker(engine) as newer, ThreadPoolExecutor(1) as pool:
        newer.calendar_writes.enqueue([write("hold_9", version=3)])
        older = pool.submit(enqueue, 2)  # waits on the row not yet committed
        newer.commit()
        older.result(timeout=10)
    with worker(engine) as uow:
        assert uow.calendar_writes.get_many([("acme", "hold_9", "att_a")]) == [
            write("hold_9", version=3)
        ]
