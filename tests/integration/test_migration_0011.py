"""Migration 0011: an index of the calendar deletes, for the sweeper's purge.

A database at revision 0010 with calendar writes of each kind (deletes and
puts, delivered long ago and lately, one still pending) is migrated: the
purge's statement picks the same writes as before, in the same order, the
index holds the deletes alone under the code's condition (tables.py), and on
SQLite the statement reads it. The downgrade drops it; the upgrade runs again.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import Engine, inspect, text

from slotward.adapters.store import calendar_write_repos
from slotward.adapters.store import tables as t
from slotward.adapters.store.plans import plan_of
from tests.integration.databases import empty_database, migrate_to

NAME = "ix_calendar_writes_deletes"
# (hold, action, state, written_us): the purge at 100 takes the first two, oldest first.
WRITES = [
    ("hold_b", "delete", "delivered", 20),
    ("hold_a", "delete", "delivered", 10),
    ("hold_c", "delete", "delivered", 150),  # written lately
    ("hold_d", "put", "delivered", 5),  # an event still on its calendar
    ("hold_e", "delete", "pending", 5),  # not written yet (an earlier version was)
]


@pytest.fixture(params=["sqlite", "postgres"])
def db(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Engine]:
    _, engine = empty_database(request, tmp_path, request.param, "migration11")
    yield engine
    engine.dispose()


def _writes(db: Engine) -> None:
    row = (
        "INSERT INTO calendar_writes (tenant, hold_id, attendee, uid, action, status, start_us,"
        " end_us, summary, description, version, state, attempts, next_attempt_us, updated_us,"
        " written_us) VALUES ('acme', :hold, 'att_1', :hold, :action, NULL, 0, 1, 's', 'd', 1,"
        " :state, 1, 0, 0, :written)"
    )
    with db.begin() as conn:
        for hold, action, state, written in WRITES:
            conn.execute(text(row), {"hold": hold, "action": action, "state": state,
                                     "written": written})  # fmt: skip


def _purgeable(db: Engine) -> list[Any]:
    stmt = calendar_write_repos._WRITTEN
    with db.connect() as conn:
        rows = conn.execute(stmt, {"before": 100, "limit": 10}).all()
        return [tuple(r) for r in rows]


def _condition(db: Engine) -> str | None:
    with db.connect() as conn:
        if db.dialect.name == "sqlite":
            sql = conn.execute(
                text("SELECT sql FROM sqlite_master WHERE type = 'index' AND name = :name"),
                {"name": NAME},
            ).scalar()
            return None if sql is None else sql.partition(" WHERE ")[2]
        return conn.execute(
            text(
                "SELECT pg_get_expr(indpred, indrelid) FROM pg_index"
                " WHERE indexrelid::regclass::text = :name"
            ),
            {"name": NAME},
        ).scalar()


def _sqlite_plan(db: Engine) -> list[str]:
    params = {"before": 100, "limit": 10}
    plan = plan_of(calendar_write_repos._WRITTEN, params)
    with db.connect() as conn:
        raw: Any = conn.connection.dbapi_connection
        return [r[3] for r in raw.execute("EXPLAIN QUERY PLAN " + plan.sql, plan.args(params))]


def test_the_purge_picks_the_same_writes_and_reads_the_new_index(db: Engine) -> None:
    migrate_to(db, "0010")
    _writes(db)
    before = _purgeable(db)
    assert before == [("acme", "hold_a", "att_1"), ("acme", "hold_b", "att_1")]
    migrate_to(db, "0011")
    assert _purgeable(db) == before
    condition = _condition(db)
    if db.dialect.name == "sqlite":
        assert condition == t.CALENDAR_WRITE_DELETE  # as written: what the purge names
        assert any(f"INDEX {NAME} (state=? AND written_us<?)" in s for s in _sqlite_plan(db))
    else:
        assert condition is not None
        assert "'delete'" in condition, condition
    indexes = {i["name"]: i["column_names"] for i in inspect(db).get_indexes("calendar_writes")}
    assert indexes == {i.name: [c.name for c in i.columns] for i in t.calendar_writes.indexes}
    with db.connect() as conn:  # the deletes alone
        count = "SELECT count(*) FROM calendar_writes WHERE " + t.CALENDAR_WRITE_DELETE
        assert conn.execute(text(count)).scalar() == 4


def test_the_code_declares_the_index_the_migration_makes() -> None:
    (index,) = [i for i in t.calendar_writes.indexes if i.name == NAME]
    assert [c.name for c in index.columns] == ["state", "written_us"]
    for dialect in ("sqlite", "postgresql"):
        assert str(index.dialect_options[dialect]["where"]) == t.CALENDAR_WRITE_DELETE


def test_the_downgrade_drops_it_and_the_upgrade_runs_again(db: Engine) -> None:
    migrate_to(db, "0011")
    _writes(db)
    before = _purgeable(db)
    migrate_to(db, "0010", down=True)
    assert _condition(db) is None
    assert _purgeable(db) == before
    migrate_to(db, "0011")
    assert _condition(db) is not None
    assert _purgeable(db) == before
