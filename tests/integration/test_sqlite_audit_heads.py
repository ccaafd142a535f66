"""A group of SQLite's writer reads each audit head once and moves its row once.

The heads of the tenants' chains are kept in memory for the length of one
group's transaction (adapters/store/sqlite/savepoint.py). These tests hold the
chain to what it would be without that: a call's savepoint rolled back, a call
that committed then failed, a group that failed and ran again call by call,
and a second process writing the same file between two groups. After each,
every chain verifies, and its head row is its last entry.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from sqlalchemy import text
from sqlalchemy.exc import IntegrityError

from slotward.adapters.store.sqlite.store import SqliteStore
from slotward.engine.clock import FixedClock, TimeOrderedIds
from slotward.engine.errors import SlotwardError
from slotward.engine.model import Principal, Reply
from slotward.engine.ports import UnitOfWork
from slotward.engine.rules.attendees import parse_attendees
from slotward.engine.rules.audit import verify_chain
from slotward.engine.rules.policy import Policy
from slotward.engine.rules.timenorm import normalize_interval
from slotward.engine.usecases.effects import audit
from slotward.engine.usecases.placing import HoldRequest, place_hold

NOW = datetime(2030, 10, 1, 9, 0, tzinfo=UTC)
EVENT_WAIT = 30.0  # a guard against a hang, never a timing assertion
IDS = TimeOrderedIds()


def _create(
    n: int, tenant: str = "acme", *, then: Callable[[], None] | None = None, workflow: str = "wf"
) -> Any:
    req = HoldRequest(
        principal=Principal(tenant, "agent-a", "agent", 50), step=None,
        workflow_id=f"{workflow}-{n}",
        attendees=parse_attendees([f"person-{n}@example.com"]),
        interval=normalize_interval(
            start=f"2030-10-{2 + n // 10:02d}T{9 + n % 10:02d}:00:00Z", duration_minutes=30
        ),
        title="Sync", description=None, priority=50, ttl_seconds=300,
    )  # fmt: skip

    def create(uow: UnitOfWork) -> Reply:
        reply = place_hold(uow, req, Policy(), FixedClock(NOW), IDS)
        if then is not None:
            then()
        return reply

    return create


def _audited(
    tenant: str, action: str, *, fail_after: bool = False, commit_first: bool = False
) -> Any:
    """A call appending to ``tenant``'s chain: then failing, or committing and appending again."""

    def run(uow: UnitOfWork) -> int:
        with uow:
            seq = audit(uow, tenant, "ops", NOW, action, None, None, "ok", audit_key=None)
            if commit_first:
                uow.commit()
                seq = audit(
                    uow, tenant, "ops", NOW, action + ".2", None, None, "ok", audit_key=None
                )
            if fail_after:
                raise LookupError("refused after auditing")
            uow.commit()
        return seq

    return run


def _clash(uow: UnitOfWork) -> None:
    """A call whose statement fails in the database: the group runs again alone."""
    with uow:
        audit(uow, "acme", "ops", NOW, "clash", None, None, "ok", audit_key=None)
        conn: Any = uow._conn  # type: ignore[attr-defined]
        conn.execute(text("INSERT INTO audit_heads VALUES ('acme', 0, 'x')"))  # its primary key
        uow.commit()


async def _group(sqlite_store: SqliteStore, calls: list[Callable[[UnitOfWork], Any]]) -> list[Any]:
    """``calls`` started in one turn of the event loop, so that they run as one group."""
    before = sqlite_store.writer_stats()
    tasks = [asyncio.create_task(sqlite_store.write(c)) for c in calls]
    answers = await asyncio.gather(*tasks, return_exceptions=True)
    assert sqlite_store.writer_stats().groups - before.groups == 1
    return answers


def _chains(sqlite_store: SqliteStore) -> dict[str, tuple[list[str], tuple[int, str]]]:
    """Each tenant's actions in order and its head row, after checking the chain verifies."""

    def read(uow: UnitOfWork) -> dict[str, tuple[list[str], tuple[int, str]]]:
        with uow:
            found: dict[str, tuple[list[str], tuple[int, str]]] = {}
            for tenant in uow.audit.tenants():
                entries = uow.audit.entries(tenant, 0, 1000)
                assert verify_chain(entries).ok, tenant
                conn: Any = uow._conn  # type: ignore[attr-defined]
                head = conn.execute(
                    text("SELECT seq, hash FROM audit_heads WHERE tenant = :t"), {"t": tenant}
                ).first()
                assert head is not None
                assert tuple(head) == (entries[-1].seq, entries[-1].hash)
                found[tenant] = ([e.action for e in entries], (head[0], head[1]))
            return found

    return sqlite_store.run_write_sync(read)


async def test_a_group_extends_each_chain_in_order_and_moves_its_head_once(
    sqlite_store: SqliteStore,
) -> None:
    await sqlite_store.write(_create(0))  # acme's chain has its head row
    sent: list[str] = []
    raw: list[Any] = []

    def trace(uow: UnitOfWork) -> None:
        raw.append(uow._conn.connection.dbapi_connection)  # type: ignore[attr-defined]
        raw[0].set_trace_callback(sent.append)

    calls = [trace, _create(1), _create(2, "globex"), _create(3), _create(4, "globex"), _create(5)]
    answers = await _group(sqlite_store, calls)
    raw[0].set_trace_callback(None)
    assert all(a.created for a in answers[1:])
    chains = _chains(sqlite_store)
    assert chains["acme"][0] == ["hold.create"] * 4
    assert chains["globex"][0] == ["hold.create"] * 2
    heads_read = [s for s in sent if "FROM audit_heads" in s]
    heads_made = [s for s in sent if s.startswith("INSERT INTO audit_heads")]
    heads_moved = [s for s in sent if s.startswith("UPDATE audit_heads")]
    assert len(heads_read) == 2  # each tenant's, at its first use in the group
    assert len(heads_made) == 1  # globex's chain starts in the group
    # Each moved once, by one executemany (traced a row at a time), before the COMMIT.
    assert len(heads_moved) == 2
    assert sent[-3:] == [*heads_moved, "COMMIT"]


async def test_a_rolled_back_call_leaves_the_head_where_it_was(sqlite_store: SqliteStore) -> None:
    def refuse() -> None:
        raise LookupError("refused after writing")

    await sqlite_store.write(_create(0))
    answers = await _group(
        sqlite_store,
        [_create(1), _create(2, then=refuse), _audited("acme", "undone", fail_after=True),
         _create(3)],
    )  # fmt: skip
    assert isinstance(answers[1], LookupError)
    assert isinstance(answers[2], LookupError)
    actions, head = _chains(sqlite_store)["acme"]
    # The second create failed after its commit (kept, as alone); "undone" was not.
    assert actions == ["hold.create"] * 4
    assert head[0] == 4


async def test_a_call_that_committed_then_failed_keeps_what_it_committed(
    sqlite_store: SqliteStore,
) -> None:
    await sqlite_store.write(_create(0))
    answers = await _group(
        sqlite_store,
        [_audited("acme", "kept", commit_first=True, fail_after=True), _create(1),
         _audited("globex", "new", commit_first=True, fail_after=True), _create(2, "globex")],
    )  # fmt: skip
    assert isinstance(answers[0], LookupError)
    assert isinstance(answers[2], LookupError)
    chains = _chains(sqlite_store)
    assert chains["acme"][0] == ["hold.create", "kept", "hold.create"]
    assert chains["globex"][0] == ["new", "hold.create"]


async def test_a_group_run_again_call_by_call_keeps_the_chain(sqlite_store: SqliteStore) -> None:
    await sqlite_store.write(_create(0))
    answers = await _group(sqlite_store, [_create(1), _audited("acme", "a"), _clash, _create(2)])
    assert isinstance(answers[2], IntegrityError)
    assert not isinstance(answers[0], BaseException)
    assert answers[0].created
    assert answers[1] == 3
    actions, head = _chains(sqlite_store)["acme"]
    assert actions == ["hold.create", "hold.create", "a", "hold.create"]
    assert head[0] == 4
    # and the next group starts from the rows, not from what the failed one kept
    await _group(sqlite_store, [_create(3), _create(4)])
    assert _chains(sqlite_store)["acme"][1][0] == 6


async def test_another_process_between_two_groups_is_seen(
    sqlite_store: SqliteStore, sqlite_file: Path
) -> None:
    other = SqliteStore.open(f"sqlite:///{sqlite_file}", timedelta(hours=24))
    try:
        await _group(sqlite_store, [_create(0), _create(1)])
        await _group(other, [_create(2), _create(3)])
        await _group(sqlite_store, [_create(4), _create(5)])
        await other.write(_create(6))
        await _group(sqlite_store, [_create(7), _audited("acme", "last")])
    finally:
        await other.close()
    actions, head = _chains(sqlite_store)["acme"]
    assert actions == ["hold.create"] * 8 + ["last"]
    assert head[0] == 9


async def test_a_refused_create_in_a_group_audits_its_refusal(sqlite_store: SqliteStore) -> None:
    # A conflict commits its audit entry, then raises: kept, as alone.
    await sqlite_store.write(_create(0))
    answers = await _group(sqlite_store, [_create(0, workflow="other"), _create(1)])
    assert isinstance(answers[0], SlotwardError)
    assert isinstance(answers[1], Reply)
    assert answers[1].created
    actions, head = _chains(sqlite_store)["acme"]
    assert actions == ["hold.create"] * 3
    assert head[0] == 3
