"""Peeks on a real SQLite file: a read of one statement runs without a
transaction around it, and any other still reads one snapshot.

adapters/store/sqlite/peeks.py: a peek its caller calls ``alone`` (a known
replay, a hold by its id) runs its one statement outside a transaction (two
statements fewer); one that reaches a second statement is run again whole in
BEGIN ... ROLLBACK, so the caller's word is never what keeps a read consistent.
The statements are caught by sqlite3's own trace.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from functools import partial
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import select

from slotward.adapters.store import tables
from slotward.adapters.store.sqlite.store import SqliteStore
from slotward.api.replays import known_create
from slotward.engine.clock import FixedClock, TimeOrderedIds
from slotward.engine.errors import NotFound
from slotward.engine.model import Principal, Reply
from slotward.engine.ports import UnitOfWork
from slotward.engine.rules.attendees import parse_attendees
from slotward.engine.rules.external import ExternalPolicy
from slotward.engine.rules.policy import Policy
from slotward.engine.rules.timenorm import normalize_interval
from slotward.engine.usecases import reads
from slotward.engine.usecases.known_replays import replay_known
from slotward.engine.usecases.placing import HoldRequest, place_hold

NOW = datetime(2030, 10, 1, 9, 0, tzinfo=UTC)
AGENT = Principal("acme", "agent-a", "agent", 50)
# Built once: the runner caches a statement's plan by its identity.
_ALL_HOLDS = select(tables.holds.c.id)


def _request(n: int) -> HoldRequest:
    return HoldRequest(
        principal=AGENT, workflow_id=f"wf-{n}", step=None,
        attendees=parse_attendees([f"person-{n}@example.com"]),
        interval=normalize_interval(start=f"2030-10-14T{9 + n:02d}:00:00Z", duration_minutes=30),
        title="Sync", description=None, priority=50, ttl_seconds=300,
    )  # fmt: skip


async def _create(sqlite_store: SqliteStore, n: int) -> Reply:
    req, clock, ids = _request(n), FixedClock(NOW), TimeOrderedIds()
    return await sqlite_store.write(
        lambda uow: place_hold(uow, req, Policy(), clock, ids, external=ExternalPolicy())
    )


def _hold_id(reply: Reply) -> str:
    assert reply.hold_id is not None
    return reply.hold_id


def _driver(uow: UnitOfWork) -> Any:
    return uow._conn.connection.dbapi_connection  # type: ignore[attr-defined]


@contextmanager
def _traced(raw: sqlite3.Connection) -> Iterator[list[str]]:
    sent: list[str] = []
    raw.set_trace_callback(sent.append)
    try:
        yield sent
    finally:
        raw.set_trace_callback(None)


def _kind(statement: str) -> str:
    return statement.split(None, 1)[0].upper()


async def test_a_known_replay_peeked_alone_is_one_select_and_answers_as_in_a_transaction(
    sqlite_store: SqliteStore,
) -> None:
    first = await _create(sqlite_store, 0)
    known = known_create(AGENT.tenant, "wf-0", _request(0).attendees, first)
    assert known is not None
    read = partial(replay_known, known=known, now=NOW)
    raw = await sqlite_store.peek(_driver)
    with _traced(raw) as sent:
        alone = await sqlite_store.peek(read, alone=True)
    assert [_kind(s) for s in sent] == ["SELECT"], sent
    with _traced(raw) as sent:
        wrapped = await sqlite_store.peek(read)
    assert [_kind(s) for s in sent] == ["BEGIN", "SELECT", "ROLLBACK"], sent
    assert alone is not None
    assert alone == wrapped
    assert alone.replayed
    assert alone.body == first.body
    assert alone.hold_status == "held"


async def test_a_hold_peeked_alone_is_one_select_found_or_not(sqlite_store: SqliteStore) -> None:
    hold_id = _hold_id(await _create(sqlite_store, 1))
    raw = await sqlite_store.peek(_driver)
    with _traced(raw) as sent:
        doc = await sqlite_store.peek(
            partial(reads.get_hold, principal=AGENT, hold_id=hold_id, now=NOW), alone=True
        )
    assert doc["id"] == hold_id
    with pytest.raises(NotFound):
        await sqlite_store.peek(
            partial(reads.get_hold, principal=AGENT, hold_id="hold_nope", now=NOW), alone=True
        )
    assert [_kind(s) for s in sent] == ["SELECT"], sent


async def test_a_read_of_two_statements_said_alone_runs_again_in_one_snapshot(
    sqlite_store: SqliteStore, sqlite_file: Path
) -> None:
    hold_id = _hold_id(await _create(sqlite_store, 2))
    other = sqlite3.connect(sqlite_file, isolation_level=None)
    runs: list[tuple[int, int]] = []

    def two_reads(uow: UnitOfWork) -> tuple[int, int]:
        with uow:
            before = uow.holds.get(AGENT.tenant, hold_id)
            # Another connection commits between the two statements: the second
            # must not see it, or the read would be of two snapshots.
            other.execute("UPDATE holds SET priority = priority + 1 WHERE id = ?", (hold_id,))
            after = uow.holds.get(AGENT.tenant, hold_id)
        assert before is not None
        assert after is not None
        runs.append((before.priority, after.priority))
        return runs[-1]

    raw = await sqlite_store.peek(_driver)
    try:
        with _traced(raw) as sent:
            found = await sqlite_store.peek(two_reads, alone=True)
    finally:
        other.close()
    # Its first statement alone, refused at its second; then all of it in a transaction.
    assert [_kind(s) for s in sent] == ["SELECT", "BEGIN", "SELECT", "SELECT", "ROLLBACK"], sent
    assert runs == [found]  # the refused run answered nothing
    # The second run began after the first run's UPDATE (50 -> 51) and read
    # 51 twice, though the UPDATE between its statements had made it 52.
    assert found == (51, 51)


async def test_a_read_that_swallows_the_refusal_is_still_run_again(
    sqlite_store: SqliteStore,
) -> None:
    hold_id = _hold_id(await _create(sqlite_store, 3))

    def careless(uow: UnitOfWork) -> str:
        with uow:
            uow.holds.get(AGENT.tenant, hold_id)
            try:
                uow.holds.get(AGENT.tenant, hold_id)
            except Exception:  # a read that catches too much
                return "answered from half a read"
            return "answered from one snapshot"

    assert await sqlite_store.peek(careless, alone=True) == "answered from one snapshot"

    def mistaken(uow: UnitOfWork) -> str:
        with uow:
            uow.holds.get(AGENT.tenant, hold_id)
            try:
                uow.holds.get(AGENT.tenant, hold_id)
            except Exception:  # taken for "not there"
                raise NotFound("no such hold", code="hold_not_found") from None
            return "found in one snapshot"

    assert await sqlite_store.peek(mistaken, alone=True) == "found in one snapshot"


async def test_a_read_alone_leaves_no_snapshot_open(
    sqlite_store: SqliteStore, sqlite_file: Path
) -> None:
    # A statement stopped after its first row keeps its snapshot, and so the
    # WAL, until the cursor runs again: alone, first() reads to the end.
    for n in range(4, 7):
        await _create(sqlite_store, n)

    def first_of_many(uow: UnitOfWork) -> object:
        with uow:
            return uow._db.first(_ALL_HOLDS)  # type: ignore[attr-defined]

    assert await sqlite_store.peek(first_of_many, alone=True) is not None
    other = sqlite3.connect(sqlite_file, isolation_level=None)
    try:
        busy, _, _ = other.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()
    finally:
        other.close()
    assert busy == 0  # no reader holds the WAL
