"""The plans PostgreSQL runs for the store's lookups, as asyncpg sends them.

asyncpg prepares every statement and PostgreSQL caches a plan per prepared
statement, so what matters is the plan it uses for asyncpg's own statement
after many executions, not the plan of a one-off ``EXPLAIN``. The database
here is the benchmark's situation: young, filled by creates, never analysed
(docs/concurrency.md "Plans").
"""

from __future__ import annotations

import itertools
from datetime import UTC, datetime, timedelta
from typing import Any

import asyncpg  # type: ignore[import-untyped]
import pytest

from slotward.adapters.store.postgres import cursor
from slotward.adapters.store.postgres.store import PostgresStore, server_settings
from slotward.adapters.store.waits import Waits
from slotward.engine.clock import FixedClock, TimeOrderedIds
from slotward.engine.model import Principal
from slotward.engine.ports import UnitOfWork
from slotward.engine.rules.attendees import parse_attendees
from slotward.engine.rules.policy import Policy
from slotward.engine.rules.timenorm import normalize_interval
from slotward.engine.usecases.placing import HoldRequest, place_hold
from tests.conftest import TEMPLATE
from tests.contract.calendar_values import binding
from tests.contract.values import subscription
from tests.pgserver import PgServer

NOW = datetime(2030, 10, 1, 9, 0, tzinfo=UTC)
_NAMES = itertools.count(1)
CREATES = 600  # enough rows in one tenant for a tenant-wide index to be the wrong choice
EXECUTIONS = 8  # past the five custom plans after which PostgreSQL may go generic
HOT = ("ledger", "holds", "hold_attendees", "attendee_emails", "attendees", "calendar_bindings",
       "webhooks", "audit_heads")  # fmt: skip

# The lookups of a create by a fragment of their SQL, and the index each must use.
OVERLAP = {"FROM hold_attendees WHERE": "ix_hold_attendees_overlap"}
INTENT = {"holds.intent_fp =": "ix_holds_tenant_workflow_intent_id"}
BOUND = 2000  # attendees of the tenant with a calendar (none of the claims): pages of them
SUBSCRIBED = 2000  # other tenants with an active subscription (the tenant has none): pages
CHAINED = 2000  # other tenants with an audit chain: its head read by the key, not a scan
KEYED = {  # the key's record, the directory: a primary key against tenant-wide indexes
    "LEFT OUTER JOIN ledger ON": "ledger_pkey",  # read with the intent's live hold
    "FROM calendar_bindings WHERE": "calendar_bindings_pkey",  # in the same statement
    "FROM webhooks WHERE": "ix_webhooks_status_tenant",  # ... and whether the tenant subscribed
    "FROM audit_heads WHERE": "audit_heads_pkey",  # ... and its audit head, locked
    "FROM attendee_emails WHERE": "attendee_emails_pkey",
}


@pytest.fixture
def db_url(postgres: PgServer) -> str:
    return postgres.create_database(f"plans{next(_NAMES)}", template=TEMPLATE)


def _request(i: int) -> HoldRequest:
    return HoldRequest(
        principal=Principal("acme", f"agent-{i % 8}", "agent", 50),
        workflow_id=f"wf-{i}",
        step=None,
        attendees=parse_attendees([f"person-{i}@example.com"]),
        interval=normalize_interval(start="2030-10-02T10:00:00Z", duration_minutes=30),
        title="Sync",
        description=None,
        priority=50,
        ttl_seconds=600,
        client_key=f"key-{i}",
    )


def _literal(value: Any) -> str:
    """``value`` as an SQL literal, for ``EXECUTE name(...)``."""
    if value is None:
        return "NULL"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, list):
        return "ARRAY[" + ", ".join(_literal(v) for v in value) + "]::text[]"
    return "'" + str(value).replace("'", "''") + "'"


async def _lookups_of_one_create(store: PostgresStore, i: int) -> list[tuple[str, list[Any]]]:
    """The SQL and arguments of each read of a create, as the store sends them."""
    sent: list[tuple[str, list[Any]]] = []
    execute = cursor.AsyncpgCursor.execute

    def record(self: cursor.AsyncpgCursor, sql: str, args: Any = None) -> None:
        if args is not None and sql.startswith("SELECT"):
            sent.append((sql, list(args)))
        execute(self, sql, args)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(cursor.AsyncpgCursor, "execute", record)
        await _create(store, i)
    return sent


def _bind_others(uow: UnitOfWork) -> None:
    """Calendars of ``BOUND`` other attendees of the tenant: a claim's check that
    none of its own has one must find that by the bindings' primary key."""
    for i in range(BOUND):
        uow.calendars.put(binding(f"att_other_{i}", tenant="acme"))
    uow.commit()


def _subscribe_others(uow: UnitOfWork) -> None:
    """Subscriptions of ``SUBSCRIBED`` other tenants: a claim's check that its own
    has none must find that by the index of active subscriptions by tenant."""
    for i in range(SUBSCRIBED):
        uow.webhooks.add(subscription(f"whk_other_{i}", tenant=f"other-{i}"))
    uow.commit()


async def _create(store: PostgresStore, i: int) -> None:
    req, clock, ids = _request(i), FixedClock(NOW), TimeOrderedIds()
    await store.write(lambda uow: place_hold(uow, req, Policy(), clock, ids))


async def _plan_in_use(conn: Any, sql: str, args: list[Any]) -> str:
    """The plan PostgreSQL uses for asyncpg's prepared statement of ``sql``, after
    it has run it ``EXECUTIONS`` times on this connection."""
    for _ in range(EXECUTIONS):
        await conn.fetch(sql, *args)
    name = await conn.fetchval("SELECT name FROM pg_prepared_statements WHERE statement = $1", sql)
    assert name is not None, "asyncpg did not keep the statement prepared"
    call = f'EXECUTE "{name}"(' + ", ".join(_literal(a) for a in args) + ")"
    return "\n".join(r[0] for r in await conn.fetch("EXPLAIN " + call))


async def _young_database(db_url: str, *, analysed: bool = False) -> tuple[str, list[Any]]:
    """A database filled by ``CREATES`` creates in one tenant, never analysed (unless
    ``analysed``); its DSN and the lookups of one more create."""
    dsn = db_url.replace("postgresql+asyncpg://", "postgresql://")
    admin = await asyncpg.connect(dsn)
    try:
        for table in HOT:  # nothing analyses them behind the test's back
            await admin.execute(f"ALTER TABLE {table} SET (autovacuum_enabled = off)")
        await admin.execute(
            "INSERT INTO audit_heads (tenant, seq, hash)"
            " SELECT 'other-' || g, 1, md5(g::text) FROM generate_series(1, $1::int) AS g",
            CHAINED,
        )
        store = await PostgresStore.open(db_url, timedelta(hours=24))
        try:
            for i in range(CREATES):
                await _create(store, i)
            await store.write(_bind_others)
            await store.write(_subscribe_others)
            sent = await _lookups_of_one_create(store, CREATES)
        finally:
            await store.close()
        seen = await admin.fetch(
            "SELECT relname FROM pg_stat_user_tables WHERE relname = ANY($1::text[])"
            " AND (last_analyze IS NOT NULL OR last_autoanalyze IS NOT NULL)",
            list(HOT),
        )
        assert seen == [], "a table was analysed: this is not the young database"
        if analysed:
            await admin.execute("ANALYZE")
    finally:
        await admin.close()
    return dsn, sent


async def _check(dsn: str, sent: list[Any], lookups: dict[str, str], **settings: str) -> None:
    """Each of ``lookups`` runs on its index, on a connection with the store's settings
    (and ``settings``)."""
    conn = await asyncpg.connect(dsn, server_settings={**server_settings(Waits()), **settings})
    try:
        for fragment, index in lookups.items():
            found = [(sql, args) for sql, args in sent if fragment in " ".join(sql.split())]
            assert len(found) == 1, (fragment, [s for s, _ in sent])
            plan = await _plan_in_use(conn, *found[0])
            assert index in plan, plan
            assert "Seq Scan" not in plan, plan
    finally:
        await conn.close()


async def test_the_overlap_and_intent_lookups_keep_their_index_on_a_young_database(
    db_url: str,
) -> None:
    dsn, sent = await _young_database(db_url)
    await _check(dsn, sent, {**OVERLAP, **INTENT})


async def test_once_analysed_even_generic_plans_keep_every_lookup_on_its_index(
    db_url: str,
) -> None:
    dsn, sent = await _young_database(db_url, analysed=True)
    await _check(dsn, sent, {**OVERLAP, **INTENT, **KEYED}, plan_cache_mode="auto")
