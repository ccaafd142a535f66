"""Migration 0007: the outbox is numbered per hold and made ready for the relay.

A database is built at revision 0006 with holds and outbox rows as the code
before 0007 wrote them (one event per transition, ``attempts`` 0, due at
creation), then migrated: each hold's events are numbered in the order they
were written, each hold knows how many it has emitted, nothing is fanned out
or settled yet, and the new tables are the ones the code declares. The
downgrade gives the old columns back, the rows kept.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import Engine, inspect, text

from slotward.adapters.store import tables as t
from tests.integration.databases import empty_database, migrate_to

# (id, hold, created_us): written out of id order, two in one microsecond.
EVENTS = [
    ("evt_03", "hold_a", 30),
    ("evt_01", "hold_a", 10),
    ("evt_02", "hold_b", 20),
    ("evt_05", "hold_a", 40),
    ("evt_04", "hold_a", 40),  # the same instant as evt_05: the id decides
    ("evt_06", None, 50),  # a workflow's retry storm: no hold
]
NEW_TABLES = ("webhooks", "deliveries", "delivery_attempts", "leases")
LATER_INDEXES = {"ix_holds_tenant_start_id"}  # migration 0009's, not there at 0007


@pytest.fixture(params=["sqlite", "postgres"])
def db(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Engine]:
    _, engine = empty_database(request, tmp_path, request.param, "migration7")
    yield engine
    engine.dispose()


def _old_rows(db: Engine) -> None:
    """Holds and events as the code before 0007 wrote them."""
    hold = (
        "INSERT INTO holds (id, tenant, key, workflow_id, agent_id, attendees, start_us, end_us,"
        " title, priority, status, expires_us, token, intent_fp, created_us, updated_us,"
        " audit_seq) VALUES (:id, 'acme', :id, 'wf', 'agent', '[]', 1, 2, 'Sync', 50, 'held',"
        " 3, 1, 'f', 1, 1, 1)"
    )
    event = (
        "INSERT INTO outbox (id, tenant, type, hold_id, payload, state, attempts, created_us,"
        " next_attempt_us) VALUES (:id, 'acme', 'hold.created', :hold, '{}', 'pending', 0, :at,"
        " :at)"
    )
    with db.begin() as conn:
        for name in ("hold_a", "hold_b", "hold_c"):
            conn.execute(text(hold), {"id": name})
        for event_id, hold_id, created_us in EVENTS:
            conn.execute(text(event), {"id": event_id, "hold": hold_id, "at": created_us})


def _rows(db: Engine, sql: str) -> dict[Any, Any]:
    with db.connect() as conn:
        return {row[0]: tuple(row[1:]) for row in conn.execute(text(sql))}


def test_existing_events_are_numbered_per_hold_and_wait_for_the_relay(db: Engine) -> None:
    migrate_to(db, "0006")
    _old_rows(db)
    migrate_to(db, "0007")

    events = _rows(db, "SELECT id, seq, fanned, state, settled_us FROM outbox")
    assert {k: v[0] for k, v in events.items()} == {
        "evt_01": 1, "evt_03": 2, "evt_04": 3, "evt_05": 4, "evt_02": 1, "evt_06": None,
    }  # fmt: skip
    assert {v[1:] for v in events.values()} == {(False, "pending", None)}
    holds = _rows(db, "SELECT id, event_seq FROM holds")
    assert holds == {"hold_a": (4,), "hold_b": (1,), "hold_c": (0,)}


def test_the_migrated_schema_is_the_one_the_code_declares(db: Engine) -> None:
    migrate_to(db, "0007")
    schema = inspect(db)
    for name in ("outbox", "holds", *NEW_TABLES):
        columns = {c["name"]: c for c in schema.get_columns(name)}
        table = t.metadata.tables[name]
        assert set(columns) == {c.name for c in table.columns}, name
        assert all(columns[c.name]["nullable"] == c.nullable for c in table.columns), name
        indexes = {i["name"]: i["column_names"] for i in schema.get_indexes(name)}
        for index in table.indexes:
            if index.name in LATER_INDEXES:
                continue
            assert indexes.get(index.name) == [c.name for c in index.columns], index.name
        pk = schema.get_pk_constraint(name)["constrained_columns"]
        assert pk == [c.name for c in table.primary_key.columns], name
    assert "ix_outbox_state_next" not in {i["name"] for i in schema.get_indexes("outbox")}


def test_the_downgrade_gives_the_old_columns_back_and_keeps_the_rows(db: Engine) -> None:
    migrate_to(db, "0006")
    _old_rows(db)
    migrate_to(db, "0007")
    migrate_to(db, "0006", down=True)

    schema = inspect(db)
    assert not set(NEW_TABLES) & set(schema.get_table_names())
    assert "event_seq" not in {c["name"] for c in schema.get_columns("holds")}
    columns = {c["name"] for c in schema.get_columns("outbox")}
    assert {"attempts", "next_attempt_us"} <= columns
    assert not {"seq", "fanned", "settled_us"} & columns
    assert "ix_outbox_state_next" in {i["name"] for i in schema.get_indexes("outbox")}
    events = _rows(db, "SELECT id, attempts, next_attempt_us, created_us FROM outbox")
    assert events == {e: (0, at, at) for e, _, at in EVENTS}
    migrate_to(db, "0007")  # and up again
    assert _rows(db, "SELECT id, event_seq FROM holds")["hold_a"] == (4,)
