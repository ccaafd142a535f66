"""The PostgreSQL store on a real server: schema, defence in depth, races, plans.

Two ``PostgresStore`` instances on one database stand for two server
processes: each has its own connection pools, and only PostgreSQL stands
between them.
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import AsyncIterator, Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from sqlalchemy import Engine, create_engine, event, text
from sqlalchemy.exc import IntegrityError
from sqlalchemy.pool import NullPool

from slotward.adapters.store.instants import from_us
from slotward.adapters.store.postgres.store import PostgresStore
from slotward.adapters.store.repos import SqlUnitOfWork
from slotward.adapters.store.waits import Waits
from slotward.engine.clock import FixedClock, TimeOrderedIds
from slotward.engine.errors import SlotConflict, Unavailable
from slotward.engine.model import Principal, Reply
from slotward.engine.rules.attendees import attendee_id_for_email, parse_attendees
from slotward.engine.rules.policy import Policy
from slotward.engine.rules.timenorm import normalize_interval
from slotward.engine.usecases.lifecycle import expire_due
from slotward.engine.usecases.placing import HoldRequest, place_hold
from slotward.engine.usecases.reads import verify_audit
from tests.conftest import TEMPLATE
from tests.pgserver import PgServer

NOW = datetime(2030, 10, 1, 9, 0, tzinfo=UTC)
MAX_HOLD = timedelta(hours=24)
POLICY = Policy()
IDS = TimeOrderedIds()
_NAMES = itertools.count(1)
EVENT_WAIT = 30.0  # a guard against a hang, never a timing assertion


@pytest.fixture
def db_url(postgres: PgServer) -> str:
    return postgres.create_database(f"store{next(_NAMES)}", template=TEMPLATE)


@pytest.fixture
def sync_db(db_url: str) -> Iterator[Engine]:
    engine = create_engine(db_url.replace("+asyncpg", "+psycopg"), poolclass=NullPool)
    yield engine
    engine.dispose()


@pytest.fixture
async def stores(db_url: str) -> AsyncIterator[tuple[PostgresStore, PostgresStore]]:
    one = await PostgresStore.open(db_url, MAX_HOLD)
    two = await PostgresStore.open(db_url, MAX_HOLD)
    yield one, two
    await one.close()
    await two.close()


def _request(workflow: str, start: str, priority: int = 50, agent: str = "a") -> HoldRequest:
    return HoldRequest(
        principal=Principal("acme", agent, "agent", 100),
        workflow_id=workflow,
        step=None,
        attendees=parse_attendees(["room@example.com"]),
        interval=normalize_interval(start=start, duration_minutes=60),
        title="Sync",
        description=None,
        priority=priority,
        ttl_seconds=60,
    )


async def _place(store: PostgresStore, req: HoldRequest, clock: FixedClock) -> Reply | Exception:
    try:
        return await store.write(lambda uow: place_hold(uow, req, POLICY, clock, IDS))
    except SlotConflict as exc:
        return exc


async def test_the_exclusion_constraint_refuses_overlapping_active_rows(sync_db: Engine) -> None:
    insert = text(
        "INSERT INTO hold_attendees (hold_id, attendee, tenant, start_us, end_us, active) "
        "VALUES (:id, 'att', 't', :s, :e, :active)"
    )
    with sync_db.begin() as conn:
        conn.execute(insert, {"id": "h1", "s": 0, "e": 100, "active": True})
        conn.execute(insert, {"id": "h2", "s": 100, "e": 200, "active": True})  # back to back
        conn.execute(insert, {"id": "h3", "s": 50, "e": 150, "active": False})  # inactive
    with pytest.raises(IntegrityError) as info, sync_db.begin() as conn:
        conn.execute(insert, {"id": "h4", "s": 50, "e": 150, "active": True})
    assert "hold_attendees_no_overlap" in str(info.value)


async def test_two_stores_racing_for_one_slot_have_one_winner(
    stores: tuple[PostgresStore, PostgresStore], sync_db: Engine
) -> None:
    clock = FixedClock(NOW)
    for round_ in range(5):
        start = f"2030-10-1{round_}T10:00:00Z"
        results = await asyncio.gather(
            *(_place(stores[i % 2], _request(f"wf-{round_}-{i}", start), clock) for i in range(16))
        )
        assert sum(isinstance(r, Reply) for r in results) == 1
        assert all(isinstance(r, Reply | SlotConflict) for r in results)
    with sync_db.connect() as conn:
        assert conn.execute(text("SELECT count(*) FROM holds")).scalar_one() == 5


async def test_racing_priorities_end_with_one_live_hold_and_a_sound_chain(
    stores: tuple[PostgresStore, PostgresStore], sync_db: Engine
) -> None:
    clock = FixedClock(NOW)
    start = "2030-10-14T10:00:00Z"
    reqs = [_request(f"wf-{i}", start, priority=10 * (i % 9 + 1)) for i in range(18)]
    await asyncio.gather(*(_place(stores[i % 2], r, clock) for i, r in enumerate(reqs)))
    with sync_db.connect() as conn:
        live = conn.execute(
            text("SELECT priority FROM holds WHERE status = 'held'")
        ).scalars().all()  # fmt: skip
        bad = conn.execute(
            text(
                "SELECT count(*) FROM holds l JOIN holds w ON w.id = l.preempted_by "
                "WHERE w.priority <= l.priority"
            )
        ).scalar_one()
    assert len(live) == 1
    assert bad == 0
    principal = Principal("acme", "a", "agent", 100)
    check = await stores[0].read(lambda uow: verify_audit(uow, principal))
    assert check["ok"] is True


async def test_sweepers_in_two_processes_expire_each_hold_once(
    stores: tuple[PostgresStore, PostgresStore], sync_db: Engine
) -> None:
    clock = FixedClock(NOW)
    for i in range(20):
        await _place(stores[0], _request(f"wf-{i}", f"2030-10-{10 + i}T10:00:00Z"), clock)
    clock.advance(61)
    swept = await asyncio.gather(
        *(s.write(lambda uow: expire_due(uow, clock, IDS, 7)) for s in stores * 3)
    )
    assert sum(swept) == 20
    with sync_db.connect() as conn:
        events = conn.execute(
            text("SELECT count(*) FROM outbox WHERE type = 'hold.expired'")
        ).scalar_one()  # fmt: skip
    assert events == 20


async def test_a_claim_over_an_unswept_expired_hold_frees_it_first(
    stores: tuple[PostgresStore, PostgresStore], sync_db: Engine
) -> None:
    """The constraint cannot see expiry; the claim marks the old hold expired."""
    clock = FixedClock(NOW)
    first = await _place(stores[0], _request("wf-1", "2030-10-14T10:00:00Z"), clock)
    assert isinstance(first, Reply)
    clock.advance(61)
    second = await _place(stores[1], _request("wf-2", "2030-10-14T10:30:00Z"), clock)
    assert isinstance(second, Reply)
    with sync_db.connect() as conn:
        status = conn.execute(
            text("SELECT status FROM holds WHERE id = :id"), {"id": first.hold_id}
        ).scalar_one()
    assert status == "expired"


def test_the_overlap_query_uses_its_index_under_custom_plans(sync_db: Engine) -> None:
    room = attendee_id_for_email("acme", "room@example.com")
    rows = [
        {"id": f"h{i}", "a": f"att{i % 50}", "s": i * 10_000_000, "e": i * 10_000_000 + 5}
        for i in range(5000)
    ]
    with sync_db.begin() as conn:
        conn.execute(
            text(
                "INSERT INTO hold_attendees (hold_id, attendee, tenant, start_us, end_us, active)"
                " VALUES (:id, :a, 'acme', :s, :e, true)"
            ),
            rows,
        )
        conn.execute(text("ANALYZE hold_attendees"))
    sent: list[tuple[str, Any]] = []

    def capture(_conn: Any, _cursor: Any, statement: str, params: Any, *_: Any) -> None:
        sent.append((statement, params))

    with sync_db.connect() as conn:
        conn.execute(text("SET plan_cache_mode = force_custom_plan"))
        event.listen(conn, "before_cursor_execute", capture)
        SqlUnitOfWork(conn, MAX_HOLD, begin=None).holds.blocking(
            "acme", [room, "att7"], from_us(250_000_000), from_us(260_000_000), NOW
        )
        event.remove(conn, "before_cursor_execute", capture)
        statement, params = sent[0]  # the overlap scan (no candidate: nothing more)
        plan = conn.exec_driver_sql("EXPLAIN " + statement, params).scalars().all()
    joined = "\n".join(plan)
    assert "ix_hold_attendees_overlap" in joined, joined
    assert "Seq Scan" not in joined, joined


async def test_a_runaway_statement_is_cancelled_by_the_server_as_a_503(db_url: str) -> None:
    bounded = await PostgresStore.open(db_url, MAX_HOLD, Waits(statement_seconds=0.3))
    try:
        with pytest.raises(Unavailable):
            await bounded.read(lambda uow: uow._conn.exec_driver_sql("SELECT pg_sleep(5)"))  # type: ignore[attr-defined]
        assert await bounded.read(lambda uow: uow._conn.exec_driver_sql("SELECT 1").scalar()) == 1  # type: ignore[attr-defined]
    finally:
        await bounded.close()


async def test_migrating_waits_for_another_migration_however_long_it_takes(
    db_url: str, sync_db: Engine
) -> None:
    bounded = PostgresStore(
        db_url, MAX_HOLD, Waits(queue_seconds=0.1, lock_seconds=0.1, statement_seconds=0.1)
    )
    try:
        with sync_db.connect() as other, other.begin():
            other.execute(text("SELECT pg_advisory_xact_lock(73912026)"))  # a migration running
            migrating = asyncio.ensure_future(bounded.migrate())
            await asyncio.sleep(0.5)  # past lock_timeout and statement_timeout
            assert not migrating.done()
        await asyncio.wait_for(migrating, EVENT_WAIT)
    finally:
        await bounded.close()
