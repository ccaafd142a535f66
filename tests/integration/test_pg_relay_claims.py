"""Relays side by side on PostgreSQL: claims are disjoint, one never committed is free,
and one lease has one holder.

Each relay is a unit of work of the SQL store on a connection of its own
(psycopg, SQLAlchemy's runner: the asyncpg one is the contract suite's),
left open while the other claims, as two server processes would be.
"""

from __future__ import annotations

import itertools
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager

import pytest
from sqlalchemy import Connection, Engine, create_engine, text
from sqlalchemy.exc import DBAPIError
from sqlalchemy.pool import NullPool

from slotward.adapters.store.repos import SqlUnitOfWork
from tests.conftest import TEMPLATE
from tests.contract.values import MAX_HOLD, NOW, at, delivery, event, subscription
from tests.pgserver import PgServer

COUNT = 6
_NAMES = itertools.count(1)


@pytest.fixture
def engine(postgres: PgServer) -> Iterator[Engine]:
    url = postgres.create_database(f"relay_claims_{next(_NAMES)}", template=TEMPLATE)
    made = create_engine(url.replace("+asyncpg", "+psycopg"), poolclass=NullPool)
    with made.connect() as conn:
        uow = SqlUnitOfWork(conn, MAX_HOLD, begin=None)
        with uow:
            uow.webhooks.add(subscription("whk_1"))
            for n in range(COUNT):  # one hold each: no order holds any back
                uow.outbox.add(event(f"evt_{n}", hold_id=f"hold_{n}", fanned=True))
                uow.deliveries.add([delivery(f"dlv_{n}", f"evt_{n}", "whk_1", hold_id=f"hold_{n}")])
            uow.commit()
    yield made
    made.dispose()


@contextmanager
def relay(engine: Engine) -> Iterator[tuple[SqlUnitOfWork, Connection]]:
    """A unit of work entered on a connection of its own, not committed."""
    with engine.connect() as conn:
        uow = SqlUnitOfWork(conn, MAX_HOLD, begin=None)
        with uow:
            # A claim that waited for another's lock would fail here, not hang.
            conn.execute(text("SET LOCAL lock_timeout = '2s'"))
            yield uow, conn


def claim(uow: SqlUnitOfWork, owner: str, limit: int = COUNT) -> list[str]:
    return sorted(c.delivery.id for c in uow.deliveries.claim(owner, NOW, at(5), limit))


def test_two_relays_claiming_at_once_get_disjoint_batches(engine: Engine) -> None:
    with relay(engine) as (a, _), relay(engine) as (b, _):
        first = claim(a, "relay-a", limit=4)
        second = claim(b, "relay-b")  # does not wait for a: its rows are skipped
        assert len(first) == 4
        assert len(second) == COUNT - 4
        assert not set(first) & set(second)
        a.commit()
        b.commit()
    with relay(engine) as (c, _):
        assert claim(c, "relay-c") == []  # every claim is live


def test_one_subscription_is_shared_by_relays_side_by_side(engine: Engine) -> None:
    with relay(engine) as (a, _), relay(engine) as (b, _):
        assert len(claim(a, "relay-a", limit=1)) == 1
        assert len(claim(b, "relay-b", limit=1)) == 1  # the subscription's row is not locked


def test_a_claim_rolled_back_is_claimed_again(engine: Engine) -> None:
    with relay(engine) as (a, _):
        taken = claim(a, "relay-a", limit=2)
    # a left without a commit: rolled back
    with relay(engine) as (b, _):
        assert set(taken) <= set(claim(b, "relay-b"))


def test_a_claim_of_a_killed_session_is_claimed_again(engine: Engine) -> None:
    with relay(engine) as (a, conn_a), relay(engine) as (b, conn_b):
        pid = conn_a.execute(text("SELECT pg_backend_pid()")).scalar_one()
        taken = claim(a, "relay-a", limit=2)
        conn_b.execute(text("SELECT pg_terminate_backend(:pid)"), {"pid": pid})
        with pytest.raises(DBAPIError):  # the session is gone, with its transaction
            a.commit()
        assert set(taken) <= set(claim(b, "relay-b"))


def test_unfanned_events_are_fanned_out_by_one_relay_each(engine: Engine) -> None:
    with relay(engine) as (setup, _):
        for n in range(4):
            setup.outbox.add(event(f"evt_new_{n}", hold_id=f"hold_new_{n}", created_at=at(n)))
        setup.commit()
    with relay(engine) as (a, _), relay(engine) as (b, _):
        first = [e.id for e in a.outbox.unfanned(3)]
        second = [e.id for e in b.outbox.unfanned(3)]
        assert first == ["evt_new_0", "evt_new_1", "evt_new_2"]
        assert second == ["evt_new_3"]


def test_processes_taking_one_lease_at_once_have_one_winner(engine: Engine) -> None:
    start = threading.Barrier(4)

    def take(owner: str) -> bool:
        with relay(engine) as (uow, _):
            start.wait(timeout=10)
            taken = uow.leases.take("relay", owner, NOW, at(5))
            uow.commit()
            return taken

    with ThreadPoolExecutor(4) as pool:
        won = list(pool.map(take, [f"proc-{n}" for n in range(4)]))
    assert sorted(won) == [False, False, False, True]
