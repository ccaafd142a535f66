"""Migration 0009: approvals, approval policies, sessions and the dashboard's indexes, and back.

A database at revision 0008 with a hold and a directory entry in it is
migrated: the new tables are the ones the code declares (columns,
nullability, indexes, keys), the holds and the attendee emails gain their
indexes, a hold's second approval is refused by the database itself, and
nothing that was there changes. The downgrade drops what the upgrade added
and keeps the rest; the upgrade runs again.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import Engine, inspect, text
from sqlalchemy.exc import IntegrityError

from slotward.adapters.store import tables as t
from tests.integration.databases import empty_database, migrate_to

NEW_TABLES = ("approvals", "approval_policies", "sessions")
NEW_INDEXES = {
    "holds": ("ix_holds_tenant_start_id", ["tenant", "start_us", "id"]),
    "attendee_emails": ("ix_attendee_emails_tenant_attendee", ["tenant", "attendee_id"]),
}


@pytest.fixture(params=["sqlite", "postgres"])
def db(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Engine]:
    _, engine = empty_database(request, tmp_path, request.param, "migration9")
    yield engine
    engine.dispose()


def _old_rows(db: Engine) -> None:
    hold = (
        "INSERT INTO holds (id, tenant, key, workflow_id, agent_id, attendees, start_us, end_us,"
        " title, priority, status, expires_us, token, intent_fp, created_us, updated_us,"
        " audit_seq, event_seq) VALUES ('hold_a', 'acme', 'k', 'wf', 'agent', '[\"att_a\"]', 1, 2,"
        " 'Sync', 50, 'held', 3, 1, 'f', 1, 1, 1, 1)"
    )
    with db.begin() as conn:
        conn.execute(text(hold))
        conn.execute(text("INSERT INTO attendees VALUES ('acme', 'att_a', 'Alex', 1)"))
        conn.execute(text("INSERT INTO attendee_emails VALUES ('acme', 'a@example.com', 'att_a')"))


def _approval(db: Engine, approval_id: str, hold_id: str | None) -> None:
    row = (
        "INSERT INTO approvals (id, tenant, key, requested_by, summary, evidence, hold_id,"
        " status, created_us, updated_us, expires_us, audit_seq)"
        " VALUES (:id, 'acme', 'k', 'agent', 'Commit hold_a', '{}', :hold_id, 'pending',"
        " 1, 1, 2, 1)"
    )
    with db.begin() as conn:
        conn.execute(text(row), {"id": approval_id, "hold_id": hold_id})


def _index_names(db: Engine, table: str) -> set[str]:
    return {i["name"] for i in inspect(db).get_indexes(table) if i["name"]}


def test_the_migrated_schema_is_the_one_the_code_declares(db: Engine) -> None:
    migrate_to(db, "0009")
    schema = inspect(db)
    for name in NEW_TABLES:
        columns = {c["name"]: c for c in schema.get_columns(name)}
        table = t.metadata.tables[name]
        assert list(columns) == [c.name for c in table.columns], name
        assert all(columns[c.name]["nullable"] == c.nullable for c in table.columns), name
        indexes = {i["name"]: i for i in schema.get_indexes(name)}
        assert set(indexes) == {i.name for i in table.indexes}, name
        for index in table.indexes:
            assert indexes[index.name]["column_names"] == [c.name for c in index.columns]
            assert bool(indexes[index.name]["unique"]) == index.unique, index.name
        pk = schema.get_pk_constraint(name)["constrained_columns"]
        assert pk == [c.name for c in table.primary_key.columns], name
    for name, (index_name, columns_of) in NEW_INDEXES.items():
        found = {i["name"]: i["column_names"] for i in schema.get_indexes(name)}
        assert found[index_name] == columns_of
        declared = {
            str(i.name): [c.name for c in i.columns] for i in t.metadata.tables[name].indexes
        }
        assert declared[index_name] == columns_of


def test_a_hold_has_one_approval_and_approvals_of_no_hold_any_number(db: Engine) -> None:
    migrate_to(db, "0009")
    _approval(db, "appr_1", "hold_a")
    with pytest.raises(IntegrityError):
        _approval(db, "appr_2", "hold_a")
    _approval(db, "appr_3", None)
    _approval(db, "appr_4", None)  # NULLs are distinct
    with db.connect() as conn:
        ids = conn.execute(text("SELECT id FROM approvals ORDER BY id")).scalars().all()
    assert ids == ["appr_1", "appr_3", "appr_4"]


def test_nothing_that_was_there_changes(db: Engine) -> None:
    migrate_to(db, "0008")
    _old_rows(db)
    migrate_to(db, "0009")
    with db.connect() as conn:
        assert conn.execute(text("SELECT id, event_seq FROM holds")).all() == [("hold_a", 1)]
        emails = conn.execute(text("SELECT email, attendee_id FROM attendee_emails")).all()
        assert emails == [("a@example.com", "att_a")]


def test_the_downgrade_drops_what_it_added_and_keeps_the_rest(db: Engine) -> None:
    migrate_to(db, "0008")
    _old_rows(db)
    before = set(inspect(db).get_table_names())
    indexes_before = {name: _index_names(db, name) for name in NEW_INDEXES}
    migrate_to(db, "0009")
    _approval(db, "appr_1", "hold_a")
    migrate_to(db, "0008", down=True)

    assert set(inspect(db).get_table_names()) == before
    assert {name: _index_names(db, name) for name in NEW_INDEXES} == indexes_before
    with db.connect() as conn:
        assert conn.execute(text("SELECT id FROM holds")).all() == [("hold_a",)]
        assert conn.execute(text("SELECT email FROM attendee_emails")).all() == [("a@example.com",)]
    migrate_to(db, "0009")  # and up again
    assert set(NEW_TABLES) <= set(inspect(db).get_table_names())
    assert all(index in _index_names(db, name) for name, (index, _) in NEW_INDEXES.items())
