"""What a fresh create costs SQLite's writer, counted in statements: a ratchet.

A create's time on the one writer thread is mostly its statements (issue 16):
the count of a create in a group, with an attendee the directory has never
seen, is pinned here, so a statement added to the hot path is a decision and
not an accident. The statements are caught by sqlite3's own trace.
"""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime
from typing import Any

from slotward.adapters.store.sqlite.store import SqliteStore
from slotward.engine.clock import FixedClock, TimeOrderedIds
from slotward.engine.model import Principal, Reply
from slotward.engine.ports import UnitOfWork
from slotward.engine.rules.attendees import parse_attendees
from slotward.engine.rules.external import ExternalPolicy
from slotward.engine.rules.policy import Policy
from slotward.engine.rules.timenorm import normalize_interval
from slotward.engine.usecases.placing import HoldRequest, place_hold

NOW = datetime(2030, 10, 1, 9, 0, tzinfo=UTC)
EVENT_WAIT = 30.0  # a guard against a hang, never a timing assertion

# The directory; the ledger record, the live intent, whether an attendee has
# a calendar (none has: their bindings are not read), whether the tenant has an
# active subscription and the attendees' holds overlapping the claim (none:
# no hold is read), in one statement; the new attendee and its email; the audit entry (its head read
# by the group's first create, its row moved once, before the group's COMMIT);
# the hold and its attendee; the record; the event. No savepoint: a group runs
# without them unless one of its calls leaves work to undo
# (adapters/store/sqlite/savepoint.py).
FRESH_CREATE_IN_A_GROUP = 9


def _creating(n: int) -> Any:
    req = HoldRequest(
        principal=Principal("acme", "agent-a", "agent", 50), workflow_id=f"wf-{n}", step=None,
        attendees=parse_attendees([f"person-{n}@example.com"]),
        interval=normalize_interval(start=f"2030-10-14T{9 + n:02d}:00:00Z", duration_minutes=30),
        title="Sync", description=None, priority=50, ttl_seconds=300,
    )  # fmt: skip
    clock, ids = FixedClock(NOW), TimeOrderedIds()

    def create(uow: UnitOfWork) -> Reply:
        # As served: calendars are read when an attendee has one (none here).
        return place_hold(uow, req, Policy(), clock, ids, external=ExternalPolicy())

    return create


class _Traced:
    """Calls of one group: the first finds the connection, the others trace between them."""

    def __init__(self) -> None:
        self.sent: list[str] = []
        self._raw: Any = None

    def find(self, uow: UnitOfWork) -> None:
        self._raw = uow._conn.connection.dbapi_connection  # type: ignore[attr-defined]

    def start(self, uow: UnitOfWork) -> None:
        self._raw.set_trace_callback(self.sent.append)

    def stop(self, uow: UnitOfWork) -> None:
        self._raw.set_trace_callback(None)


async def test_a_fresh_create_in_a_group_runs_its_statements_and_no_more(
    sqlite_store: SqliteStore,
) -> None:
    await sqlite_store.write(_creating(0))  # the tenant's chain has its head
    traced = _Traced()
    before = sqlite_store.writer_stats()
    calls = [traced.find, _creating(1), traced.start, _creating(2), traced.stop]
    # Started in one turn of the event loop: they run as one group.
    replies = await asyncio.gather(*(asyncio.create_task(sqlite_store.write(c)) for c in calls))
    assert sqlite_store.writer_stats().groups - before.groups == 1  # they ran as one group
    replies = replies[1:]
    assert replies[0].created
    assert replies[2].created
    statements = [s for s in traced.sent if s.strip()]
    assert not [s for s in statements if "SAVEPOINT" in s]
    assert len(statements) == FRESH_CREATE_IN_A_GROUP, "\n".join(statements)


async def test_the_writers_savepoint_journals_stay_in_memory(sqlite_store: SqliteStore) -> None:
    # A create's savepoint journals some 35 pages: spilled to a temporary file
    # (sqlite3 spills past 64 KiB unless temp_store is MEMORY) that was two
    # write() calls a page, more system calls than the group's COMMIT made.
    def temp_store(uow: UnitOfWork) -> int:
        return int(uow._conn.exec_driver_sql("PRAGMA temp_store").scalar_one())  # type: ignore[attr-defined]

    assert await sqlite_store.write(temp_store) == 2  # MEMORY
