"""Migration 0008: the three tables of calendar providers, and back.

A database at revision 0007 with a hold in it is migrated: the new tables are
the ones the code declares (columns, nullability, indexes, keys), a mirror row
gets its id from the database, and nothing that was there changes. The
downgrade drops the three tables and keeps the rest; the upgrade runs again.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import Engine, inspect, text

from slotward.adapters.store import tables as t
from tests.integration.databases import empty_database, migrate_to

NEW_TABLES = ("calendar_bindings", "calendar_busy", "calendar_writes")
# Indexes of these tables that later migrations made (each has its own test).
LATER_INDEXES = {"ix_calendar_writes_deletes"}  # 0011


@pytest.fixture(params=["sqlite", "postgres"])
def db(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Engine]:
    _, engine = empty_database(request, tmp_path, request.param, "migration8")
    yield engine
    engine.dispose()


def _a_hold(db: Engine) -> None:
    hold = (
        "INSERT INTO holds (id, tenant, key, workflow_id, agent_id, attendees, start_us, end_us,"
        " title, priority, status, expires_us, token, intent_fp, created_us, updated_us,"
        " audit_seq, event_seq) VALUES ('hold_a', 'acme', 'k', 'wf', 'agent', '[]', 1, 2,"
        " 'Sync', 50, 'held', 3, 1, 'f', 1, 1, 1, 1)"
    )
    with db.begin() as conn:
        conn.execute(text(hold))


def _busy(db: Engine, source: str) -> None:
    row = (
        "INSERT INTO calendar_busy (tenant, attendee, source, start_us, end_us)"
        " VALUES ('acme', 'att_a', :source, 10, 20)"
    )
    with db.begin() as conn:
        conn.execute(text(row), {"source": source})


def test_the_migrated_schema_is_the_one_the_code_declares(db: Engine) -> None:
    migrate_to(db, "0008")
    schema = inspect(db)
    for name in NEW_TABLES:
        columns = {c["name"]: c for c in schema.get_columns(name)}
        table = t.metadata.tables[name]
        assert list(columns) == [c.name for c in table.columns], name
        assert all(columns[c.name]["nullable"] == c.nullable for c in table.columns), name
        indexes = {i["name"]: i["column_names"] for i in schema.get_indexes(name)}
        declared = [i for i in table.indexes if i.name not in LATER_INDEXES]
        assert set(indexes) == {i.name for i in declared}, name
        for index in declared:
            assert indexes[index.name] == [c.name for c in index.columns], index.name
        pk = schema.get_pk_constraint(name)["constrained_columns"]
        assert pk == [c.name for c in table.primary_key.columns], name


def test_mirror_rows_are_numbered_by_the_database_past_32_bits(db: Engine) -> None:
    migrate_to(db, "0008")
    _busy(db, "a.ics")
    with db.begin() as conn:
        if db.dialect.name == "postgresql":
            conn.execute(text("SELECT setval('calendar_busy_id_seq', 3000000000)"))
        else:
            conn.execute(text("UPDATE calendar_busy SET id = 3000000000"))
    _busy(db, "b.ics")
    with db.connect() as conn:
        ids: dict[str, int] = dict(conn.execute(text("SELECT source, id FROM calendar_busy")).all())
    assert ids["b.ics"] == 3000000001  # a sequence of ids that a 32-bit column would not hold


def test_nothing_that_was_there_changes(db: Engine) -> None:
    migrate_to(db, "0007")
    _a_hold(db)
    migrate_to(db, "0008")
    with db.connect() as conn:
        assert conn.execute(text("SELECT id, event_seq FROM holds")).all() == [("hold_a", 1)]


def test_the_downgrade_drops_the_tables_and_keeps_the_rest(db: Engine) -> None:
    migrate_to(db, "0007")
    _a_hold(db)
    before = set(inspect(db).get_table_names())
    migrate_to(db, "0008")
    _busy(db, "a.ics")
    migrate_to(db, "0007", down=True)

    schema = inspect(db)
    assert set(schema.get_table_names()) == before
    assert not set(NEW_TABLES) & set(schema.get_table_names())
    with db.connect() as conn:
        assert conn.execute(text("SELECT id FROM holds")).all() == [("hold_a",)]
    migrate_to(db, "0008")  # and up again
    assert set(NEW_TABLES) <= set(inspect(db).get_table_names())
