"""Writes put aside on PostgreSQL: sent together, before any read and before COMMIT.

A tenant's writes run one at a time under its lock, so every round trip of a
write transaction is time the tenant waits (docs/performance.md). The writes
whose row counts nobody needs go out as one statement of data-modifying CTEs
(adapters/store/runner.py ``put``/``flush``). On a real server: a read in the
same transaction sees them, a write to a table with a pending change waits for
it, an error among them fails the transaction whole, and a create sends the
statements counted here and no more.
"""

from __future__ import annotations

import itertools
from collections.abc import AsyncIterator, Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from sqlalchemy import insert, select, update
from sqlalchemy.exc import IntegrityError

from slotward.adapters.store import runner as runner_module
from slotward.adapters.store import tables as t
from slotward.adapters.store.postgres.store import PostgresStore
from slotward.engine.clock import FixedClock, TimeOrderedIds
from slotward.engine.model import Principal, Reply
from slotward.engine.ports import UnitOfWork
from slotward.engine.rules.attendees import parse_attendees
from slotward.engine.rules.policy import Policy
from slotward.engine.rules.timenorm import normalize_interval
from slotward.engine.usecases.placing import HoldRequest, place_hold
from tests.conftest import TEMPLATE
from tests.pgserver import PgServer

NOW = datetime(2030, 10, 1, 9, 0, tzinfo=UTC)
_NAMES = itertools.count(1)
_W = t.workflow_stats
_ADD = insert(_W)
_BUMP = (
    update(_W)
    .where(_W.c.tenant == "acme", _W.c.workflow_id == "wf")
    .values(replays=_W.c.replays + 1)
)
_READ = select(_W.c.replays).where(_W.c.tenant == "acme", _W.c.workflow_id == "wf")


@pytest.fixture
async def store(postgres: PgServer) -> AsyncIterator[PostgresStore]:
    url = postgres.create_database(f"batching{next(_NAMES)}", template=TEMPLATE)
    opened = await PostgresStore.open(url, timedelta(hours=24))
    yield opened
    await opened.close()


def _row(workflow: str = "wf", replays: int = 0) -> dict[str, Any]:
    return {"tenant": "acme", "workflow_id": workflow, "replays": replays,
            "last_replay_us": None, "storm_us": None, "storms": 0}  # fmt: skip


def _db(uow: UnitOfWork) -> Any:
    return uow._db  # type: ignore[attr-defined]


async def test_a_read_sees_the_writes_put_aside_before_it(store: PostgresStore) -> None:
    def run(uow: UnitOfWork) -> list[Any]:
        with uow:
            _db(uow).put(_ADD, _row())
            _db(uow).put(_ADD, _row("other"))
            seen: list[Any] = _db(uow).scalars(_READ)
            uow.commit()
            return seen

    assert await store.write(run) == [0]


async def test_an_update_waits_for_the_insert_it_changes(store: PostgresStore) -> None:
    # Sent together, the UPDATE would not see the row inserted beside it.
    def run(uow: UnitOfWork) -> None:
        with uow:
            _db(uow).put(_ADD, _row())
            _db(uow).put(_BUMP, {})
            _db(uow).put(_BUMP, {})  # two updates of one row: never in one statement
            uow.commit()

    await store.write(run)
    assert await store.read(lambda uow: _db(uow).scalars(_READ)) == [2]


async def test_an_error_among_the_writes_fails_the_transaction_whole(store: PostgresStore) -> None:
    def run(uow: UnitOfWork) -> None:
        with uow:
            _db(uow).put(_ADD, _row("fine"))
            _db(uow).put(_ADD, _row())
            _db(uow).put(_ADD, _row())  # the same primary key: refused at COMMIT
            uow.commit()

    with pytest.raises(IntegrityError):
        await store.write(run)
    stored = select(_W.c.workflow_id)
    assert await store.read(lambda uow: _db(uow).scalars(stored)) == []


def _counting(sent: list[str]) -> Callable[[], None]:
    """Count the statements the driver cursor sends (writes sent together count once)."""
    original = runner_module.DriverRunner.__init__

    def init(self: Any, conn: Any) -> None:
        original(self, conn)
        cursor = self._cursor

        class Counted:
            def __getattr__(self, name: str) -> Any:
                return getattr(cursor, name)

            def execute(self, sql: str, *args: Any) -> Any:
                sent.append(sql)
                return cursor.execute(sql, *args)

            def executemany(self, sql: str, *args: Any) -> Any:
                sent.append(sql)
                return cursor.executemany(sql, *args)

        self._cursor = Counted()

    runner_module.DriverRunner.__init__ = init  # type: ignore[method-assign]

    def undo() -> None:
        runner_module.DriverRunner.__init__ = original  # type: ignore[method-assign]

    return undo


@pytest.mark.parametrize("email", ["room@example.com", "new@example.com"])
async def test_a_create_sends_its_writes_in_one_statement(store: PostgresStore, email: str) -> None:
    # A create of an attendee the directory knows, or of a new one: the
    # directory, the locks, the claim's lookup (the record, the intent's live
    # hold, the calendars, the subscription, the attendees' overlapping holds
    # and the audit head, locked: one statement), then every write at once,
    # the new attendee's too. A regression in round trips fails here.
    clock = FixedClock(NOW)
    ids = TimeOrderedIds()

    def request(workflow: str, hour: int, attendee: str) -> HoldRequest:
        return HoldRequest(
            principal=Principal("acme", "a", "agent", 50), workflow_id=workflow, step=None,
            attendees=parse_attendees([attendee]),
            interval=normalize_interval(start=f"2030-10-02T{hour:02d}:00:00Z",
                                        duration_minutes=30),
            title="t", description=None, priority=50, ttl_seconds=60,
        )  # fmt: skip

    first = request("wf-1", 9, "room@example.com")
    await store.write(lambda uow: place_hold(uow, first, Policy(), clock, ids))
    sent: list[str] = []
    undo = _counting(sent)
    try:
        second = request("wf-2", 11, email)
        reply = await store.write(lambda uow: place_hold(uow, second, Policy(), clock, ids))
    finally:
        undo()
    assert reply.created is True
    assert len(sent) == 4, sent
    assert sent[-1].startswith("WITH w0 AS (INSERT INTO audit_log"), sent[-1]
    assert ("INSERT INTO attendee_emails" in sent[-1]) == (email == "new@example.com")
    found = await store.read(lambda uow: uow.directory.lookup("acme", [email], []))
    assert email in found[0]  # registered, with the rest


async def test_the_batched_statement_is_the_same_whatever_the_attendee_count(
    store: PostgresStore,
) -> None:
    # asyncpg prepares each distinct statement (and keeps 100): a batch that
    # grew a CTE per attendee would be prepared again for every count.
    clock = FixedClock(NOW)
    ids = TimeOrderedIds()

    def create(count: int) -> Callable[[UnitOfWork], Reply]:
        people = [f"p{count}-{i}@example.com" for i in range(count)]
        req = HoldRequest(
            principal=Principal("acme", "a", "agent", 50), workflow_id=f"wf-{count}", step=None,
            attendees=parse_attendees(people),
            interval=normalize_interval(start="2030-10-02T09:00:00Z", duration_minutes=30),
            title="t", description=None, priority=50, ttl_seconds=60,
        )  # fmt: skip
        return lambda uow: place_hold(uow, req, Policy(), clock, ids)

    await store.write(create(1))  # the tenant's first audit entry inserts its head
    batches: list[str] = []
    for count in (2, 3, 5):
        sent: list[str] = []
        undo = _counting(sent)
        try:
            reply = await store.write(create(count))
        finally:
            undo()
        assert reply.created is True
        batches += [sql for sql in sent if sql.startswith("WITH w0 AS")]
    assert len(batches) == 3
    assert len(set(batches)) == 1, batches
