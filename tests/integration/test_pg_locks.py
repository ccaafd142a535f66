"""What the PostgreSQL write locks exclude, and what they let run side by side.

Each case holds one transaction's locks open on a connection and asks for
others on a second connection with a short ``lock_timeout``: a lock that is
granted proves the two run side by side, a timeout that they exclude each
other. The timeout only bounds the wait for an outcome that is certain.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta

import pytest
from sqlalchemy import Connection, Engine, create_engine, event, text
from sqlalchemy.exc import OperationalError
from sqlalchemy.pool import NullPool

from slotward.adapters.store.postgres.locks import LockOrderRetry
from slotward.adapters.store.repos import SqlUnitOfWork
from tests.conftest import TEMPLATE
from tests.pgserver import PgServer

MAX_HOLD = timedelta(hours=24)
_NAMES = itertools.count(1)
Lock = Callable[[SqlUnitOfWork], None]


@pytest.fixture
def engine(postgres: PgServer) -> Iterator[Engine]:
    url = postgres.create_database(f"locks{next(_NAMES)}", template=TEMPLATE)
    made = create_engine(url.replace("+asyncpg", "+psycopg"), poolclass=NullPool)
    yield made
    made.dispose()


def _uow(conn: Connection, wanted: set[str] | None = None) -> SqlUnitOfWork:
    conn.execute(text("SET lock_timeout = '200ms'"))
    conn.commit()
    return SqlUnitOfWork(conn, MAX_HOLD, begin=None, wanted=wanted)


def _granted(engine: Engine, held: Lock, asked: Lock) -> bool:
    with engine.connect() as one, engine.connect() as two:
        first, second = _uow(one), _uow(two)
        with first:
            held(first)
            with second:
                try:
                    asked(second)
                except OperationalError as exc:
                    if "lock timeout" not in str(exc):
                        raise
                    return False
                return True


def attendees(*ids: str, tenant: str = "acme") -> Lock:
    return lambda uow: uow.lock_attendees(tenant, ids)


def tenant(name: str = "acme") -> Lock:
    return lambda uow: uow.lock_tenant(name)


def relay(*tenants: str) -> Lock:
    return lambda uow: uow.lock_part(tenants, "relay")


@pytest.mark.parametrize(
    ("held", "asked", "granted"),
    [
        (attendees("a", "b"), attendees("c", "d"), True),  # disjoint: side by side
        (attendees("a", "b"), attendees("b", "c"), False),  # one shared: one at a time
        (attendees("a"), attendees("a", tenant="beta"), True),  # other tenant
        (attendees("a"), tenant(), False),  # a whole-tenant write waits for creates
        (tenant(), attendees("z"), False),  # and creates for it
        (tenant("beta"), attendees("z"), True),
        (relay("acme", "beta"), attendees("a"), True),  # the relay beside creates
        (relay("acme"), relay("beta", "acme"), False),  # one relay at a time per tenant
        (relay("acme"), tenant(), False),  # a subscription's deletion waits for it
    ],
)
def test_which_writes_exclude_each_other(
    engine: Engine, held: Lock, asked: Lock, granted: bool
) -> None:
    assert _granted(engine, held, asked) is granted


def test_a_further_attendee_taken_elsewhere_means_running_again_with_it_first(
    engine: Engine,
) -> None:
    wanted: set[str] = set()
    with engine.connect() as one, engine.connect() as two:
        first, second = _uow(one), _uow(two, wanted)
        with first:
            first.lock_attendees("acme", ["b"])
            with second:
                second.lock_attendees("acme", ["a"])
                with pytest.raises(LockOrderRetry):
                    second.lock_attendees("acme", ["a", "b"])  # a loser's attendees: never waits
        assert wanted  # the next attempt takes b with a, in order, before anything else
        again = _uow(two, wanted)
        with again:
            again.lock_attendees("acme", ["a"])
            again.lock_attendees("acme", ["a", "b"])  # already held: nothing more to take


def test_appends_to_one_chain_wait_for_its_head(engine: Engine) -> None:
    """The head is read FOR UPDATE: a second appender waits, whatever else it locked."""

    def append(uow: SqlUnitOfWork) -> None:
        uow.audit.head("acme")

    with engine.begin() as conn:
        conn.execute(text("INSERT INTO audit_heads (tenant, seq, hash) VALUES ('acme', 1, 'h')"))
    assert _granted(engine, append, attendees("a")) is True
    assert _granted(engine, append, append) is False


def test_a_claims_lookup_locks_the_audit_head_it_reads(engine: Engine) -> None:
    """A writer's claim lookup reads the head FOR UPDATE (one round trip less a
    create): the next appender of the chain waits for it, the lookup's own
    transaction appends to what it read without reading again, and a lookup
    without a span (a replay's read) locks nothing."""
    now = datetime(2030, 10, 1, 9, 0, tzinfo=UTC)
    span = (now + timedelta(hours=1), now + timedelta(hours=2))

    def lookup(with_span: bool) -> Lock:
        def look(uow: SqlUnitOfWork) -> None:
            uow.ledger.lookup_claim(
                "acme", "k", "wf", "f" * 64, ["a"], now, span if with_span else None
            )

        return look

    def append(uow: SqlUnitOfWork) -> None:
        uow.audit.head("acme")

    with engine.begin() as conn:
        conn.execute(text("INSERT INTO audit_heads (tenant, seq, hash) VALUES ('acme', 7, 'h7')"))
    assert _granted(engine, lookup(True), append) is False
    assert _granted(engine, lookup(False), append) is True
    assert _granted(engine, lookup(True), attendees("b")) is True  # other claims go on

    with engine.connect() as conn:
        uow = _uow(conn)
        with uow:
            uow.ledger.lookup_claim("acme", "k", "wf", "f" * 64, ["a"], now, span)
            sent: list[str] = []
            event.listen(conn, "before_cursor_execute", lambda *a: sent.append(a[2]))
            assert uow.audit.head("acme") == (7, "h7")
            assert sent == []  # known from the lookup, locked: not read again
