"""The embedded SQLite store on real files: schema, transactions, concurrency.

Two ``SqliteStore`` instances on one file stand for two server processes: each
has its own connections and writer thread, and only SQLite's file locks
(``BEGIN IMMEDIATE``) stand between them.
"""

from __future__ import annotations

import asyncio
import sqlite3
import threading
from collections.abc import AsyncIterator, Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import Connection, create_engine
from sqlalchemy.exc import IntegrityError

from slotward.adapters.store import tables
from slotward.adapters.store.repos import SqlUnitOfWork
from slotward.adapters.store.sqlite.store import SqliteStore, sqlite_path
from slotward.adapters.store.waits import Waits
from slotward.engine.clock import FixedClock, TimeOrderedIds
from slotward.engine.errors import SlotConflict, Unavailable
from slotward.engine.model import AuditEntry, Hold, HoldStatus, LedgerRecord, Principal, Reply
from slotward.engine.ports import UnitOfWork
from slotward.engine.rules.attendees import attendee_id_for_email, parse_attendees
from slotward.engine.rules.audit import verify_chain
from slotward.engine.rules.policy import Policy
from slotward.engine.rules.timenorm import normalize_interval
from slotward.engine.usecases.effects import audit, emit
from slotward.engine.usecases.placing import HoldRequest, place_hold

NOW = datetime(2030, 10, 1, 9, 0, tzinfo=UTC)
MAX_HOLD = timedelta(hours=24)
POLICY = Policy()
IDS = TimeOrderedIds()
EVENT_WAIT = 30.0  # a guard against a hang, never a timing assertion


# -- fixtures and helpers -------------------------------------------------------------


@pytest.fixture
def db_path(tmp_path: Path) -> Path:
    return tmp_path / "slotward.db"


@pytest.fixture
def db_url(db_path: Path) -> str:
    return f"sqlite+aiosqlite:///{db_path}"


@pytest.fixture
def clock() -> FixedClock:
    return FixedClock(NOW)


@pytest.fixture
async def store(db_url: str) -> AsyncIterator[SqliteStore]:
    opened = SqliteStore.open(db_url, MAX_HOLD)
    yield opened
    await opened.close()


@pytest.fixture
async def other(db_url: str, store: SqliteStore) -> AsyncIterator[SqliteStore]:
    """A second store on the same file, as a second server process would open it."""
    opened = SqliteStore.open(db_url, MAX_HOLD)
    yield opened
    await opened.close()


def sql(path: Path, query: str, *params: Any) -> list[tuple[Any, ...]]:
    conn = sqlite3.connect(path)
    try:
        return conn.execute(query, params).fetchall()
    finally:
        conn.close()


def row_counts(path: Path) -> dict[str, int]:
    return {
        name: sql(path, f'SELECT count(*) FROM "{name}"')[0][0] for name in tables.metadata.tables
    }


def schema(path: Path) -> list[tuple[Any, ...]]:
    return sql(path, "SELECT type, name, tbl_name, sql FROM sqlite_master ORDER BY type, name")


def hold_request(
    *,
    workflow: str,
    start: str = "2030-10-14T14:00:00Z",
    attendees: tuple[str, ...] = ("alex@example.com",),
    priority: int = 50,
    agent: str = "agent-a",
    tenant: str = "acme",
    minutes: int = 30,
) -> HoldRequest:
    return HoldRequest(
        principal=Principal(tenant, agent, "agent", 50),
        workflow_id=workflow,
        step=None,
        attendees=parse_attendees(list(attendees)),
        interval=normalize_interval(start=start, duration_minutes=minutes),
        title="Sync",
        description=None,
        priority=priority,
        ttl_seconds=300,
    )


def placing(req: HoldRequest, clock: FixedClock) -> Callable[[UnitOfWork], Reply]:
    return lambda uow: place_hold(uow, req, POLICY, clock, IDS)


async def audit_entries(store: SqliteStore, tenant: str) -> list[AuditEntry]:
    def read(uow: UnitOfWork) -> list[AuditEntry]:
        with uow:
            return uow.audit.entries(tenant, 0, 10_000)

    return await store.read(read)


async def all_holds(store: SqliteStore, tenant: str = "acme") -> list[Hold]:
    def read(uow: UnitOfWork) -> list[Hold]:
        with uow:
            return uow.holds.search(
                tenant, workflow_id=None, statuses=None, attendee=None, after_id=None,
                limit=10_000, now=NOW,
            )  # fmt: skip

    return await store.read(read)


async def wait(flag: threading.Event) -> None:
    """Wait for another thread's signal without blocking the event loop."""
    assert await asyncio.get_running_loop().run_in_executor(None, flag.wait, EVENT_WAIT)


# -- migrations -------------------------------------------------------------------------------


async def test_migrations_create_every_table_column_and_index(
    store: SqliteStore, db_path: Path
) -> None:
    found = {name for (name,) in sql(db_path, "SELECT name FROM sqlite_master WHERE type='table'")}
    assert set(tables.metadata.tables) <= found
    assert found - set(tables.metadata.tables) - {"alembic_version"} == set()
    for name, table in tables.metadata.tables.items():
        columns = [row[1] for row in sql(db_path, f'PRAGMA table_info("{name}")')]
        assert columns == [c.name for c in table.columns], name
        pk = [
            row[1]
            for row in sorted(sql(db_path, f'PRAGMA table_info("{name}")'), key=lambda r: r[5])
            if row[5]
        ]
        assert pk == [c.name for c in table.primary_key.columns], name
        indexes = {row[1] for row in sql(db_path, f'PRAGMA index_list("{name}")')}
        for index in table.indexes:
            assert index.name in indexes, f"{name}: index {index.name} is missing"
            cols = [row[2] for row in sql(db_path, f'PRAGMA index_info("{index.name}")')]
            assert cols == [c.name for c in index.columns], index.name
    assert len(sql(db_path, "SELECT version_num FROM alembic_version")) == 1


async def test_opening_again_migrates_nothing_and_keeps_the_data(
    db_url: str, db_path: Path, clock: FixedClock
) -> None:
    first = SqliteStore.open(db_url, MAX_HOLD)
    try:
        placed = await first.write(placing(hold_request(workflow="wf-1"), clock))
    finally:
        await first.close()
    shape, counts = schema(db_path), row_counts(db_path)
    version = sql(db_path, "SELECT * FROM alembic_version")

    for _ in range(2):
        again = SqliteStore.open(db_url, MAX_HOLD)
        try:
            again.migrate()  # and once more on an open store
            holds = await all_holds(again)
        finally:
            await again.close()
        assert [h.id for h in holds] == [placed.hold_id]
        assert schema(db_path) == shape
        assert sql(db_path, "SELECT * FROM alembic_version") == version
        assert row_counts(db_path) == counts


async def test_the_file_is_in_wal_mode(store: SqliteStore, db_path: Path) -> None:
    assert sql(db_path, "PRAGMA journal_mode") == [("wal",)]


async def test_store_connections_are_in_wal_mode_with_a_busy_timeout(store: SqliteStore) -> None:
    def pragmas(uow: UnitOfWork) -> tuple[Any, ...]:
        conn: Connection = uow._conn  # type: ignore[attr-defined]
        return tuple(
            conn.exec_driver_sql(f"PRAGMA {name}").scalar()
            for name in ("journal_mode", "busy_timeout", "foreign_keys")
        )

    journal, busy, fks = await store.read(pragmas)
    assert journal == "wal"
    assert busy > 0
    assert fks == 1
    assert (await store.write(pragmas))[0] == "wal"


# -- transactions --------------------------------------------------------------------------


def _hold(hold_id: str, *, start_hour: int = 14) -> Hold:
    start = datetime(2030, 10, 14, start_hour, tzinfo=UTC)
    return Hold(
        id=hold_id, key=f"idem_{hold_id}", tenant="acme", workflow_id="wf", agent_id="agent-a",
        attendees=("att_1", "att_2"), start=start, end=start + timedelta(minutes=30),
        title="t", description=None, priority=50, status=HoldStatus.HELD,
        expires_at=NOW + timedelta(minutes=5), token=1, intent_fp="fp", created_at=NOW,
        updated_at=NOW, audit_seq=1,
    )  # fmt: skip


class Boom(Exception):
    pass


async def test_a_use_case_that_raises_rolls_back_completely(
    store: SqliteStore, db_path: Path, clock: FixedClock
) -> None:
    before = row_counts(db_path)

    def half_done(uow: UnitOfWork) -> None:
        with uow:
            hold = _hold("hold_a")
            audit(uow, "acme", "agent-a", NOW, "hold.create", hold.key, hold.id, "fresh",
                  audit_key=None)  # fmt: skip
            uow.holds.add(hold)
            uow.ledger.add(
                LedgerRecord(
                    tenant="acme",
                    key=hold.key,
                    fingerprint="fp",
                    state="succeeded",
                    created=True,
                    body=b"{}",
                    created_at=NOW,
                    expires_at=NOW,
                    hold_id=hold.id,
                )
            )
            uow.directory.register("acme", [("att_1", "one@example.com")], NOW)
            uow.directory.put("acme", "att_2", "Two", ["two@example.com"], NOW)
            emit(uow, IDS, hold, "hold.created", NOW)
            assert uow.holds.get("acme", "hold_a") is not None  # written, not committed
            raise Boom("the use case failed after writing")

    with pytest.raises(Boom):
        await store.write(half_done)
    assert row_counts(db_path) == before
    assert sql(db_path, "SELECT count(*) FROM hold_attendees") == [(0,)]

    # the writer connection is clean: the next use case runs and starts the chain at 1
    reply = await store.write(placing(hold_request(workflow="wf-1"), clock))
    assert reply.created is True
    assert [e.seq for e in await audit_entries(store, "acme")] == [1]
    assert sql(db_path, "SELECT count(*) FROM holds") == [(1,)]


async def test_leaving_a_unit_of_work_without_commit_rolls_back(
    store: SqliteStore, db_path: Path
) -> None:
    def forgetful(uow: UnitOfWork) -> str:
        with uow:
            uow.holds.add(_hold("hold_b"))
            emit(uow, IDS, _hold("hold_b"), "hold.created", NOW)
        return "returned normally"

    assert await store.write(forgetful) == "returned normally"
    assert sql(db_path, "SELECT count(*) FROM holds") == [(0,)]
    assert sql(db_path, "SELECT count(*) FROM outbox") == [(0,)]


async def test_a_failing_statement_rolls_back_the_statements_before_it(
    store: SqliteStore, db_path: Path
) -> None:
    def duplicate(uow: UnitOfWork) -> None:
        with uow:
            audit(uow, "acme", "agent-a", NOW, "hold.create", "idem_x", "hold_c", "fresh",
                  audit_key=None)  # fmt: skip
            uow.holds.add(_hold("hold_c"))
            uow.holds.add(_hold("hold_c", start_hour=16))  # same primary key
            uow.commit()

    with pytest.raises(IntegrityError):
        await store.write(duplicate)
    assert sql(db_path, "SELECT count(*) FROM holds") == [(0,)]
    assert sql(db_path, "SELECT count(*) FROM audit_log") == [(0,)]
    assert sql(db_path, "SELECT count(*) FROM audit_heads") == [(0,)]


async def test_a_refused_claim_writes_only_its_audit_entry(
    store: SqliteStore, db_path: Path, clock: FixedClock
) -> None:
    await store.write(placing(hold_request(workflow="wf-1"), clock))
    before = row_counts(db_path)
    with pytest.raises(SlotConflict):
        await store.write(placing(hold_request(workflow="wf-2"), clock))
    after = row_counts(db_path)
    assert after == {**before, "audit_log": before["audit_log"] + 1}
    assert [e.outcome for e in await audit_entries(store, "acme")] == ["fresh", "conflict"]


# -- two stores on one file --------------------------------------------------------------------


async def test_two_stores_on_one_file_never_double_book(
    store: SqliteStore, other: SqliteStore, db_path: Path, clock: FixedClock
) -> None:
    rounds = 12
    for i in range(rounds):
        start = f"2030-10-{14 + i // 8:02d}T{9 + i % 8:02d}:00:00Z"
        mine = hold_request(workflow=f"wf-a-{i}", start=start, agent="agent-a")
        theirs = hold_request(workflow=f"wf-b-{i}", start=start, agent="agent-b")
        results = await asyncio.gather(
            store.write(placing(mine, clock)),
            other.write(placing(theirs, clock)),
            return_exceptions=True,
        )
        placed = [r for r in results if isinstance(r, Reply)]
        refused = [r for r in results if isinstance(r, SlotConflict)]
        assert len(placed) == 1, results
        assert len(refused) == 1, results
        assert placed[0].created is True
        conflict = refused[0].extra["conflicts"]
        assert [c["kind"] for c in conflict] == ["held"]
        assert conflict[0]["same_intent"] is True

    holds = await all_holds(other)
    assert len(holds) == rounds
    assert len({(h.start, h.attendees) for h in holds}) == rounds
    assert sql(db_path, "SELECT count(*) FROM hold_attendees") == [(rounds,)]
    assert sql(db_path, "SELECT count(*) FROM ledger") == [(rounds,)]
    entries = await audit_entries(store, "acme")
    assert len(entries) == 2 * rounds
    assert verify_chain(entries).ok  # one chain, never forked by the two writers
    assert sorted(e.outcome for e in entries) == ["conflict"] * rounds + ["fresh"] * rounds


async def test_two_stores_racing_with_different_priorities_leave_one_live_hold(
    store: SqliteStore, other: SqliteStore, clock: FixedClock
) -> None:
    """Different intents on one slot: the higher priority wins whoever writes first."""
    for i in range(8):
        start = f"2030-10-20T{9 + i:02d}:00:00Z"
        low = hold_request(workflow=f"wf-low-{i}", start=start, priority=20, minutes=30)
        high = hold_request(
            workflow=f"wf-high-{i}", start=start, priority=40, agent="agent-b", minutes=45
        )
        results = await asyncio.gather(
            store.write(placing(low, clock)),
            other.write(placing(high, clock)),
            return_exceptions=True,
        )
        assert isinstance(results[1], Reply), results
        assert results[1].created is True
        # the lower one either lost outright or was placed and then preempted
        assert isinstance(results[0], Reply | SlotConflict), results

    holds = await all_holds(store)
    live = [h for h in holds if h.status is HoldStatus.HELD]
    assert len(live) == 8
    assert {h.priority for h in live} == {40}
    preempted = [h for h in holds if h.status is HoldStatus.PREEMPTED]
    assert len(holds) == len(live) + len(preempted)
    assert {h.preempted_by for h in preempted} <= {h.id for h in live}


async def test_the_same_intent_from_two_stores_lands_once(
    store: SqliteStore, other: SqliteStore, db_path: Path, clock: FixedClock
) -> None:
    """A retry that reaches another process while the first is writing replays."""
    req = hold_request(workflow="wf-same")
    results = await asyncio.gather(
        store.write(placing(req, clock)), other.write(placing(req, clock))
    )
    assert sorted(r.replayed for r in results) == [False, True]
    assert results[0].body == results[1].body
    assert results[0].key == results[1].key
    assert sql(db_path, "SELECT count(*) FROM holds") == [(1,)]
    assert sql(db_path, "SELECT count(*) FROM ledger") == [(1,)]


# -- reads ----------------------------------------------------------------------------------------


async def test_reads_see_committed_data_only(
    store: SqliteStore, other: SqliteStore, clock: FixedClock
) -> None:
    written, release = threading.Event(), threading.Event()

    def slow_commit(uow: UnitOfWork) -> str:
        with uow:
            uow.holds.add(_hold("hold_pending"))
            written.set()
            assert release.wait(EVENT_WAIT)
            uow.commit()
        return "committed"

    def find(uow: UnitOfWork) -> Hold | None:
        with uow:
            return uow.holds.get("acme", "hold_pending")

    def blockers(uow: UnitOfWork) -> list[Hold]:
        with uow:
            return uow.holds.blocking("acme", ["att_1"], NOW, NOW + timedelta(days=30), NOW)

    # On the writer thread (a synchronous caller's): the write stays open while we read.
    pending = asyncio.ensure_future(asyncio.to_thread(store.run_write_sync, slow_commit))
    try:
        await wait(written)
        assert await store.read(find) is None  # same store, reader connection
        assert await other.read(find) is None  # another process
        assert await other.read(blockers) == []
    finally:
        release.set()
    assert await pending == "committed"
    assert (await store.read(find)) is not None
    assert (await other.read(find)) is not None
    assert [h.id for h in await other.read(blockers)] == ["hold_pending"]


async def test_a_read_sees_one_snapshot_while_another_store_commits(
    store: SqliteStore, other: SqliteStore, clock: FixedClock
) -> None:
    await store.write(placing(hold_request(workflow="wf-1"), clock))
    first_read, committed = threading.Event(), threading.Event()

    def twice(uow: UnitOfWork) -> tuple[int, int]:
        with uow:
            before = len(uow.holds.search(
                "acme", workflow_id=None, statuses=None, attendee=None, after_id=None,
                limit=100, now=NOW,
            ))  # fmt: skip
            first_read.set()
            assert committed.wait(EVENT_WAIT)
            after = len(uow.holds.search(
                "acme", workflow_id=None, statuses=None, attendee=None, after_id=None,
                limit=100, now=NOW,
            ))  # fmt: skip
            return before, after

    reading = asyncio.ensure_future(store.read(twice))
    try:
        await wait(first_read)
        second = hold_request(workflow="wf-2", start="2030-10-15T14:00:00Z")
        await other.write(placing(second, clock))  # a writer is not blocked by the reader
    finally:
        committed.set()
    assert await reading == (1, 1)
    assert len(await all_holds(store)) == 2


# -- the overlap query ------------------------------------------------------------------------


def _blocking_plan(db_path: Path) -> tuple[str, list[str]]:
    """Run ``SqlHolds.blocking`` on its own connection; EXPLAIN every SQL it sent.

    The statements are caught by sqlite3's own trace (as run, values bound in):
    the repositories run them on the driver's cursor, not through SQLAlchemy.
    """
    engine = create_engine(f"sqlite:///{db_path}")
    sent: list[str] = []
    plan: list[str] = []
    try:
        with engine.connect() as conn:
            raw: Any = conn.connection.dbapi_connection
            raw.set_trace_callback(sent.append)
            # p0 and q0 hold slots from NOW + 1 day on (see _populate).
            found = SqlUnitOfWork(conn, MAX_HOLD).holds.blocking(
                "acme",
                [attendee_id_for_email("acme", "p0@example.com"),
                 attendee_id_for_email("acme", "q0@example.com")],
                NOW + timedelta(days=1),
                NOW + timedelta(days=1, hours=4),
                NOW,
            )  # fmt: skip
            raw.set_trace_callback(None)
            assert sent, "blocking() sent no SQL"
            assert conn.dialect.name == "sqlite"
            for statement in sent:
                rows = conn.exec_driver_sql("EXPLAIN QUERY PLAN " + statement)
                plan.extend(row[3] for row in rows)
    finally:
        engine.dispose()
    assert found, "the probe must meet holds, or the holds step goes unchecked"
    return "\n".join(sent), plan


async def _populate(store: SqliteStore, clock: FixedClock, n: int = 60) -> None:
    for i in range(n):
        start = (NOW + timedelta(days=1, minutes=30 * i)).strftime("%Y-%m-%dT%H:%M:%SZ")
        attendees = (f"p{i % 7}@example.com", f"q{i % 5}@example.com")
        await store.write(
            placing(hold_request(workflow=f"wf-{i}", start=start, attendees=attendees), clock)
        )


async def test_the_overlap_query_uses_the_tenant_attendee_start_index(
    store: SqliteStore, db_path: Path, clock: FixedClock
) -> None:
    await _populate(store, clock)
    statement, plan = _blocking_plan(db_path)
    assert "hold_attendees" in statement
    overlap = [step for step in plan if "hold_attendees" in step]
    assert overlap, plan
    for step in overlap:
        assert "INDEX ix_hold_attendees_overlap" in step, plan
        for column in ("tenant=?", "attendee=?", "start_us"):
            assert column in step, step
    assert not any(step.startswith("SCAN hold_attendees") for step in plan), plan


async def test_the_overlap_query_reaches_holds_by_id_not_by_scanning_live_holds(
    store: SqliteStore, db_path: Path, clock: FixedClock
) -> None:
    """The candidate holds come from the overlap index; ``holds`` rows must then be
    fetched by primary key. Walking every live hold of every tenant (the status
    index) would make each claim cost grow with the size of the whole database."""
    await _populate(store, clock)
    _, plan = _blocking_plan(db_path)
    holds_steps = [step for step in plan if " holds " in f"{step} "]
    assert holds_steps, plan
    assert not any(step.startswith("SCAN holds") for step in holds_steps), plan
    assert not any("ix_holds_status_expires" in step for step in holds_steps), plan


# -- bounded waits ---------------------------------------------------------------------------


async def test_a_write_still_in_line_after_its_timeout_gets_503_and_never_runs(
    db_url: str,
) -> None:
    # Every write on the writer thread, where calls wait in line (a call the event
    # loop's thread hands on waits there too: tests/integration/test_sqlite_loop_writer.py).
    bounded = SqliteStore(
        sqlite_path(db_url), MAX_HOLD, waits=Waits(queue_seconds=0.2), writes_on_loop=False
    )
    bounded.migrate()
    started = threading.Event()
    release = threading.Event()
    ran: list[str] = []

    def slow(uow: UnitOfWork) -> None:  # keeps the one writer thread busy
        started.set()
        release.wait(EVENT_WAIT)
        ran.append("slow")

    def queued(uow: UnitOfWork) -> None:
        ran.append("queued")

    try:
        first = asyncio.ensure_future(bounded.write(slow))
        assert await asyncio.to_thread(started.wait, EVENT_WAIT)
        with pytest.raises(Unavailable, match="too busy"):
            await bounded.write(queued)  # answered while the writer is still busy
        assert not first.done()
        release.set()
        await first
        await bounded.write(lambda uow: None)  # the thread has passed the abandoned call
        assert ran == ["slow"]  # nothing of the refused call ran
        await bounded.write(queued)  # a call that did not wait runs as usual
        assert ran == ["slow", "queued"]
    finally:
        release.set()
        await bounded.close()
