"""Migration 0010: three of the ledger's indexes made partial, and back.

A database at revision 0009 with records in its ledger (a create's under its
fingerprint, a commit's under a client's key, an execution with a lease) is
migrated: each index keeps the records its lookup asks for, and only those,
the lookups find what they found before, and the indexes' conditions are the
code's (tables.py). The downgrade makes them whole again; the upgrade runs
again.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import Engine, text

from slotward.adapters.store import ledger_repo, ops_repos
from slotward.adapters.store import tables as t
from tests.integration.databases import empty_database, migrate_to

FP_CREATE, FP_COMMIT = "idem_" + "a" * 64, "idem_" + "b" * 64
PARTIAL = {
    "ix_ledger_tenant_fingerprint": t.LEDGER_UNDER_CLIENT_KEY,
    "ix_ledger_tenant_workflow": t.LEDGER_EXECUTION,
    "ix_ledger_lease": t.LEDGER_LEASED,
}


@pytest.fixture(params=["sqlite", "postgres"])
def db(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Engine]:
    _, engine = empty_database(request, tmp_path, request.param, "migration10")
    yield engine
    engine.dispose()


def _records(db: Engine) -> None:
    row = (
        "INSERT INTO ledger (tenant, key, fingerprint, state, body, hold_id, created_us,"
        " expires_us, kind, workflow_id, lease_token, lease_expires_us, created)"
        " VALUES ('acme', :key, :fp, 'succeeded', :body, NULL, :at, 10, :kind, 'wf', :lease,"
        " :lease_us, :created)"
    )
    rows: list[dict[str, Any]] = [
        {"key": FP_CREATE, "fp": FP_CREATE, "at": 1, "kind": "hold"},
        {"key": "client:k1", "fp": FP_COMMIT, "at": 2, "kind": "hold"},
        {"key": "client:k2", "fp": "run-1", "at": 3, "kind": "execution", "lease": "l",
         "lease_us": 50},
    ]  # fmt: skip
    with db.begin() as conn:
        for r in rows:
            values = {"body": b"{}", "lease": None, "lease_us": None, "created": True} | r
            conn.execute(text(row), values)


def _lookups(db: Engine) -> tuple[Any, ...]:
    def run(stmt: Any, params: dict[str, Any]) -> list[Any]:
        return [tuple(r)[:2] for r in conn.execute(stmt, params).all()]

    with db.connect() as conn:
        return (
            run(ledger_repo._BY_FINGERPRINT, {"tenant": "acme", "fingerprint": FP_CREATE}),
            run(ledger_repo._BY_FINGERPRINT, {"tenant": "acme", "fingerprint": FP_COMMIT}),
            run(ledger_repo._FOR_WORKFLOW, {"tenant": "acme", "workflow_id": "wf", "limit": 5}),
            run(ops_repos._EXECUTING.where(t.ledger.c.state == "succeeded"), {"now": 10}),
        )


def _conditions(db: Engine) -> dict[str, str | None]:
    with db.connect() as conn:
        if db.dialect.name == "sqlite":
            rows = conn.execute(text("SELECT name, sql FROM sqlite_master WHERE type = 'index'"))
            found = {name: sql for name, sql in rows if name in PARTIAL}
            return {n: s.partition(" WHERE ")[2] or None for n, s in found.items()}
        rows = conn.execute(
            text("SELECT indexrelid::regclass::text, pg_get_expr(indpred, indrelid) FROM pg_index")
        )
        return {name: where for name, where in rows if name in PARTIAL}


def test_the_indexes_keep_what_their_lookups_ask_for_and_find_the_same(db: Engine) -> None:
    migrate_to(db, "0009")
    _records(db)
    before = _lookups(db)
    migrate_to(db, "0010")
    assert _lookups(db) == before
    assert before[0] == [("acme", FP_CREATE)]  # under its fingerprint: the primary key
    assert before[1] == [("acme", "client:k1")]  # under a client's key: the index
    assert before[2] == [("acme", "client:k2")]
    conditions = _conditions(db)
    assert set(conditions) == set(PARTIAL)
    if db.dialect.name == "sqlite":
        assert conditions == PARTIAL  # as written: what the lookups name
    else:
        assert all(conditions.values()), conditions
    with db.connect() as conn:  # a create's record has no entry in the fingerprint index
        if db.dialect.name == "sqlite":
            entries = conn.execute(
                text(
                    "SELECT key FROM ledger INDEXED BY ix_ledger_tenant_fingerprint"
                    " WHERE tenant = 'acme' AND fingerprint >= '' AND " + t.LEDGER_UNDER_CLIENT_KEY
                )
            ).all()
            assert entries == [("client:k1",), ("client:k2",)]


def test_the_code_declares_the_indexes_the_migration_makes() -> None:
    for index in t.ledger.indexes:
        if index.name in PARTIAL:
            for dialect in ("sqlite", "postgresql"):
                assert str(index.dialect_options[dialect]["where"]) == PARTIAL[index.name]


def test_the_downgrade_makes_them_whole_and_the_upgrade_runs_again(db: Engine) -> None:
    migrate_to(db, "0010")
    _records(db)
    before = _lookups(db)
    migrate_to(db, "0009", down=True)
    assert _conditions(db) == dict.fromkeys(PARTIAL)
    assert _lookups(db) == before
    migrate_to(db, "0010")
    assert _lookups(db) == before
