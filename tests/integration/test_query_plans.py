"""Every prebuilt statement of the hot paths seeks an index on SQLite: none scans.

A scan costs nothing on a test's few rows and everything at a million: a
create that walked a tenant's holds in id order (the live-intent lookup) or a
purge that filtered every record of a tenant on the writer went unnoticed
until ``slotward bench scale`` met them (migration 0004). The plans are read
off the migrated schema as the store runs it, statement by statement, and
each must use the index named here.
"""

from __future__ import annotations

import asyncio
import json
import sqlite3
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import Executable, create_engine
from sqlalchemy.pool import NullPool

from slotward.adapters.store import (
    approval_repos,
    audit_repo,
    calendar_repos,
    calendar_write_repos,
    delivery_repos,
    hold_repo,
    ledger_repo,
    ops_repos,
    outbox_repo,
    repos,
    webhook_repos,
)
from slotward.adapters.store.plans import ASYNCPG, plan_of
from slotward.adapters.store.sqlite.store import SqliteStore
from tests.conftest import TEMPLATE
from tests.pgserver import PgServer

# A value for every bind name the statements use (lists for IN parameters).
PARAMS: dict[str, Any] = {
    "tenant": "acme", "workflow_id": "wf", "intent_fp": "f" * 64, "now": 10**15,
    "attendees": ["att_a", "att_b"], "start": 10**15, "end": 10**15 + 1, "lookback": 0,
    "ids": ["hold_a", "hold_b"], "id": "hold_a", "key": "idem_k", "fingerprint": "g" * 64,
    "emails": ["a@example.com"], "email": "a@example.com", "key_id": "key_a",
    "key_hash": "h", "limit": 100, "w_tenant": "acme", "w_workflow": "wf",
    "w_since_us": 0, "w_before_us": 0, "event_id": "evt_a", "subscription_id": "whk_a",
    "tenants": ["acme", "other"], "w_workflows": ["wf", "wf-2"], "delivery_id": "dlv_a",
    "at_us": 0, "status": 200,
    "error": None, "w_id": "evt_a", "v_state": "delivered", "v_settled_us": 0,
}  # fmt: skip

# (statement, the index its plan must search). Writes are not listed where they
# touch rows by primary key or insert plainly; those that read as they write are.
HOT: dict[str, tuple[Executable, str]] = {
    "hold by id": (hold_repo._GET, "sqlite_autoindex_holds_1"),
    "overlapping holds": (hold_repo._OVERLAPPING, "ix_hold_attendees_overlap"),
    "overlapping holds by id": (hold_repo._BY_IDS, "sqlite_autoindex_holds_1"),
    "holds due for expiry": (hold_repo._DUE, "ix_holds_status_expires"),
    "ledger record": (ledger_repo._GET, "sqlite_autoindex_ledger_1"),
    # A known create's replay (each of its three parts seeks its primary key).
    "replay state": (ledger_repo._REPLAY_STATE["sqlite"][1], "sqlite_autoindex_ledger_1"),
    "replay state: its hold": (ledger_repo._REPLAY_STATE["sqlite"][1], "ix_holds_tenant_id"),
    "replay state: its emails": (
        ledger_repo._REPLAY_STATE["sqlite"][1],
        "sqlite_autoindex_attendee_emails_1",
    ),
    "replay state, no emails": (
        ledger_repo._REPLAY_STATE["sqlite"][0],
        "sqlite_autoindex_ledger_1",
    ),
    "record by fingerprint": (ledger_repo._BY_FINGERPRINT, "ix_ledger_tenant_fingerprint"),
    "records of a workflow": (ledger_repo._FOR_WORKFLOW, "ix_ledger_tenant_workflow"),
    "a tenant with records to purge": (ledger_repo._PURGEABLE, "ix_ledger_expires"),
    "a tenant's records to purge": (ledger_repo._PURGE_KEYS, "ix_ledger_tenant_expires"),
    "attendees by email": (repos._EMAILS, "sqlite_autoindex_attendee_emails_1"),
    "attendees by id": (repos._IDS, "sqlite_autoindex_attendees_1"),
    "one attendee": (repos._ATTENDEE, "sqlite_autoindex_attendees_1"),
    "one email": (repos._EMAIL, "sqlite_autoindex_attendee_emails_1"),
    "audit head": (audit_repo._HEAD, "sqlite_autoindex_audit_heads_1"),
    "key by id": (repos._KEY_BY_ID, "sqlite_autoindex_api_keys_1"),
    "workflow stats": (ops_repos._GET, "sqlite_autoindex_workflow_stats_1"),
    "workflows' stats": (ops_repos._GET_MANY["sqlite"], "sqlite_autoindex_workflow_stats_1"),
    "replays since": (ops_repos._R_SUM, "sqlite_autoindex_workflow_replays_1"),
    "events to fan out": (outbox_repo._UNFANNED, "ix_outbox_fanned_created"),
    "event by id": (outbox_repo._GET, "sqlite_autoindex_outbox_1"),
    "delivered events to purge": (outbox_repo._PURGEABLE, "ix_outbox_state_created"),
    "outbox backlog": (ops_repos._BACKLOG, "ix_outbox_state_created"),
    "dead events": (ops_repos._DEAD, "ix_outbox_state_created"),
    "deliveries due": (delivery_repos._CLAIMABLE, "ix_deliveries_state_next"),
    "an earlier delivery pending": (
        delivery_repos._CLAIMABLE,
        "ix_deliveries_subscription_hold_seq",
    ),
    "an earlier event unfanned": (delivery_repos._CLAIMABLE, "ix_outbox_hold_seq"),
    "an event's deliveries": (delivery_repos._FOR_EVENT, "ux_deliveries_event_subscription"),
    "a subscription's deliveries": (
        delivery_repos._OF_SUBSCRIPTION,
        "ix_deliveries_subscription_hold_seq",
    ),
    "a delivery's attempts": (delivery_repos._ATTEMPTS, "sqlite_autoindex_delivery_attempts_1"),
    "a delivery's last attempt": (delivery_repos._LAST_N, "sqlite_autoindex_delivery_attempts_1"),
    "deliveries by id": (delivery_repos._GET_MANY, "sqlite_autoindex_deliveries_1"),
    "an attempt numbered as it is logged": (
        delivery_repos._ADD_NUMBERED,
        "sqlite_autoindex_delivery_attempts_1",
    ),
    # Settling: once one UPDATE whose EXISTS took the state index and scanned
    # every pending delivery for each event (34 ms a call at 3,000 pending).
    "the events' delivery states": (outbox_repo._STATES_OF, "ux_deliveries_event_subscription"),
    "the fanned events to settle": (outbox_repo._FANNED_OF, "sqlite_autoindex_outbox_1"),
    "an event settled": (outbox_repo._SETTLE, "sqlite_autoindex_outbox_1"),
    "active subscriptions": (webhook_repos._ACTIVE, "ix_webhooks_status_tenant"),
    "subscription by id": (webhook_repos._GET, "sqlite_autoindex_webhooks_1"),
}


@pytest.fixture(scope="module")
def migrated(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("plans") / "plans.db"
    store = SqliteStore.open(f"sqlite:///{path}", timedelta(hours=24))
    asyncio.run(store.close())
    return path


def _steps(migrated: Path, stmt: Executable, params: dict[str, Any]) -> list[str]:
    """The steps of ``stmt``'s plan on the migrated schema, as the store binds it."""
    plan = plan_of(stmt, params)
    conn = sqlite3.connect(migrated)
    try:
        return [row[3] for row in conn.execute("EXPLAIN QUERY PLAN " + plan.sql, plan.args(params))]
    finally:
        conn.close()


# Statements given a list as one JSON array (json_each): what they may scan is
# that array, the parameter itself, and no table.
JSON_LISTS: dict[str, dict[str, Any]] = {
    "workflows' stats": {"w_workflows": json.dumps(PARAMS["w_workflows"])},
}


@pytest.mark.parametrize("name", sorted(HOT))
def test_a_hot_statement_seeks_its_index(migrated: Path, name: str) -> None:
    stmt, index = HOT[name]
    steps = _steps(migrated, stmt, PARAMS | JSON_LISTS.get(name, {}))
    assert steps, stmt
    scans = [s for s in steps if s.startswith("SCAN")]
    if name in JSON_LISTS:
        assert [s.split()[2:4] for s in scans] == [["VIRTUAL", "TABLE"]], steps
        scans = []
    assert not scans, steps
    assert any(s.startswith("SEARCH") and f"INDEX {index} (" in s for s in steps), steps


@pytest.mark.parametrize(
    "index",
    [
        "sqlite_autoindex_ledger_1",  # the record under the key
        "ix_holds_tenant_workflow_intent_id",  # the intent's live hold: its id
        "ix_holds_tenant_id",  # ... then its row
        "sqlite_autoindex_calendar_bindings_1",  # whether an attendee has a calendar
        "ix_webhooks_status_tenant",  # whether the tenant has an active subscription
        "ix_hold_attendees_overlap",  # the attendees' holds overlapping the claim
    ],
)
def test_a_claims_lookup_seeks_an_index_for_each_part(migrated: Path, index: str) -> None:
    # Every create runs it (ledger_repo._CLAIM_LOOKUP, with the span: a write's);
    # its only scans are of its row of one, on which the parts are outer-joined,
    # and of the overlapping ids the index found, to join them by commas.
    steps = _steps(migrated, ledger_repo._CLAIM_LOOKUP[True, True, "sqlite", False], PARAMS)
    scans = [s for s in steps if s.startswith("SCAN")]
    assert scans == ["SCAN CONSTANT ROW", "SCAN one", "SCAN overlap"], steps
    assert any(s.startswith("SEARCH") and f"INDEX {index} (" in s for s in steps), steps


def test_the_overlap_check_reads_its_index_alone(migrated: Path) -> None:
    # Each claim checks every hold of its attendees in a day's look-back: read
    # from the table, those rows were scattered reads, 5x dearer at 1M holds.
    steps = _steps(migrated, hold_repo._OVERLAPPING, PARAMS)
    assert any("USING COVERING INDEX ix_hold_attendees_overlap" in s for s in steps), steps


# The calendar stores' statements: the mirror is read by every claim and commit
# of a bound attendee, and rewritten by every read of its calendar.
CALENDAR_PARAMS: dict[str, Any] = PARAMS | {
    "attendee": "att_a", "sources": ["a.ics", "b.ics"], "holds": ["hold_a", "hold_b"],
    "before": 0,
}  # fmt: skip
CALENDAR_HOT: dict[str, tuple[Executable, str]] = {
    "busy blocks overlapping": (calendar_repos._OVERLAPPING, "ix_calendar_busy_attendee_start"),
    "a mirror cleared": (calendar_repos._MIRROR_CLEAR, "ix_calendar_busy_attendee_start"),
    "a mirror's sources dropped": (calendar_repos._MIRROR_DROP_SOURCES, "ix_calendar_busy_source"),
    "a binding": (calendar_repos._BINDING_GET, "sqlite_autoindex_calendar_bindings_1"),
    "bindings of attendees": (calendar_repos._BINDINGS_OF, "sqlite_autoindex_calendar_bindings_1"),
    "calendar writes due": (calendar_write_repos._WRITES_DUE, "ix_calendar_writes_state_next"),
    "calendar writes by key": (
        calendar_write_repos._WRITES_OF,
        "sqlite_autoindex_calendar_writes_1",
    ),
    "calendar writes to purge": (calendar_write_repos._WRITTEN, "ix_calendar_writes_deletes"),
}


@pytest.mark.parametrize("name", sorted(CALENDAR_HOT))
def test_a_calendar_statement_seeks_its_index(migrated: Path, name: str) -> None:
    stmt, index = CALENDAR_HOT[name]
    steps = _steps(migrated, stmt, CALENDAR_PARAMS)
    assert not [s for s in steps if s.startswith("SCAN")], steps
    assert any(s.startswith("SEARCH") and f"INDEX {index} (" in s for s in steps), steps


# The approvals' statements (the sweeper's, the waiters', the decisions') and
# the dashboard's: the window of holds has its own test (test_hold_window_plan.py).
DASHBOARD_PARAMS: dict[str, Any] = PARAMS | {
    "hold_id": "hold_a", "token_hash": "t" * 64, "earliest": 0,
}  # fmt: skip
DASHBOARD_HOT: dict[str, tuple[Executable, str]] = {
    "approval by id": (approval_repos._GET, "sqlite_autoindex_approvals_1"),
    "the approval of a hold": (approval_repos._FOR_HOLD, "ux_approvals_tenant_hold"),
    "approvals due for expiry": (approval_repos._DUE, "ix_approvals_status_expires"),
    "approvals' states": (approval_repos._STATES_OF, "ix_approvals_tenant_id"),
    "a tenant's approval policy": (approval_repos._RULES, "sqlite_autoindex_approval_policies_1"),
    "session by token": (approval_repos._S_GET, "sqlite_autoindex_sessions_1"),
    "sessions to purge": (approval_repos._S_PURGE, "ix_sessions_expires"),
    "directory entries": (repos._ENTRIES, "sqlite_autoindex_attendees_1"),
    "the emails of attendees": (repos._EMAILS_OF, "ix_attendee_emails_tenant_attendee"),
    "the busiest workflows": (ops_repos._BUSIEST, "sqlite_autoindex_workflow_stats_1"),
    "a window of holds": (hold_repo._WINDOW, "ix_holds_tenant_start_id"),
}


@pytest.mark.parametrize("name", sorted(DASHBOARD_HOT))
def test_an_approval_or_dashboard_statement_seeks_its_index(migrated: Path, name: str) -> None:
    stmt, index = DASHBOARD_HOT[name]
    steps = _steps(migrated, stmt, DASHBOARD_PARAMS)
    assert not [s for s in steps if s.startswith("SCAN")], steps
    assert any(s.startswith("SEARCH") and f"INDEX {index} (" in s for s in steps), steps


def test_busy_blocks_overlapping_seek_their_index_on_postgresql(postgres: PgServer) -> None:
    # A few thousand rows still make a sequential scan cheapest: forbidden, the
    # plan shows which index serves the statement.
    url = postgres.create_database("plans_calendar_busy", template=TEMPLATE)
    engine = create_engine(url.replace("+asyncpg", "+psycopg"), poolclass=NullPool)
    start = 1_000_000_000_000_000 + 2000 * 600_000_000  # an hour amid the rows
    params = CALENDAR_PARAMS | {"attendees": ["att_1", "att_2"], "start": start}
    params["end"] = start + 3_600_000_000
    plan = plan_of(calendar_repos._OVERLAPPING, params, ASYNCPG)
    bound = plan.bind(params)
    args = ", ".join(_literal(bound[name]) for name in plan.order)
    try:
        with engine.connect() as conn:
            # Some attendees' busy weeks, the sources of each its own: with no
            # statistics the planner would pick either index of (tenant, attendee).
            conn.exec_driver_sql(
                "INSERT INTO calendar_busy (tenant, attendee, source, start_us, end_us)"
                " SELECT 'acme', 'att_' || mod(n, 40), 'evt-' || n || '.ics',"
                " 1000000000000000 + n * 600000000, 1000000000000000 + n * 600000000 + 1800000000"
                " FROM generate_series(1::bigint, 4000) AS n"
            )
            conn.exec_driver_sql("ANALYZE calendar_busy")
            conn.exec_driver_sql("SET enable_seqscan = off")
            conn.exec_driver_sql(f"PREPARE overlapping AS {plan.sql}")
            found = conn.exec_driver_sql(f"EXPLAIN EXECUTE overlapping({args})").all()
    finally:
        engine.dispose()
    steps = [row[0].strip() for row in found]
    # An index scan or a bitmap one, bounded by the window's end, not only by attendee.
    [at] = [i for i, s in enumerate(steps) if "ix_calendar_busy_attendee_start" in s]
    assert steps[at + 1].startswith("Index Cond:"), steps
    assert "start_us <" in steps[at + 1], steps
    assert not [s for s in steps if "Seq Scan" in s], steps


def _literal(value: Any) -> str:
    return str(value) if isinstance(value, int) else "'" + str(value).replace("'", "''") + "'"


# The sweepers' picks: a batch of what is due or old enough, up to a limit, on
# the writer, over and over. Each must read its index in order and stop at the
# limit: one that sorts every match first reads them all each time, however
# few it takes (the delivered events' purge read every event kept, each
# sweep, to purge none).
BATCHES = [
    (name, stmt, params)
    for table, params in ((HOT, PARAMS), (CALENDAR_HOT, CALENDAR_PARAMS),
                          (DASHBOARD_HOT, DASHBOARD_PARAMS))
    for name, (stmt, _) in table.items()
    if "to purge" in name or " due" in name
]  # fmt: skip


@pytest.mark.parametrize("name", [name for name, _, _ in BATCHES])
def test_a_sweepers_batch_reads_in_index_order_and_sorts_nothing_whole(
    migrated: Path, name: str
) -> None:
    stmt, params = next((stmt, params) for n, stmt, params in BATCHES if n == name)
    steps = _steps(migrated, stmt, params | JSON_LISTS.get(name, {}))
    assert "USE TEMP B-TREE FOR ORDER BY" not in steps, steps


def test_the_delivered_events_purge_seeks_only_events_made_before_the_cutoff(
    migrated: Path,
) -> None:
    steps = _steps(migrated, outbox_repo._PURGEABLE, PARAMS)
    wanted = "SEARCH outbox USING INDEX ix_outbox_state_created (state=? AND created_us<?)"
    assert wanted in steps, steps
