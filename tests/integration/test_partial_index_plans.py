"""The ledger's partial indexes (migration 0010) serve the lookups they were made for.

A partial index is used only where the statement's own condition implies the
index's: a lookup whose condition drifted from it would scan the ledger on
every call, and nothing else would say so. Checked on SQLite's plans, and on
PostgreSQL's generic plans (the condition must imply the index's whatever the
parameters are).
"""

from __future__ import annotations

import asyncio
import sqlite3
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import Executable, create_engine
from sqlalchemy.pool import NullPool

from slotward.adapters.store import ledger_repo, ops_repos
from slotward.adapters.store.plans import ASYNCPG, plan_of
from slotward.adapters.store.sqlite.store import SqliteStore
from tests.conftest import TEMPLATE
from tests.pgserver import PgServer

PARAMS: dict[str, Any] = {
    "tenant": "acme", "fingerprint": "idem_" + "f" * 64, "workflow_id": "wf", "limit": 10,
    "now": 10**15,
}  # fmt: skip
# (statement, the indexes its plan must search: every one of them)
LOOKUPS: dict[str, tuple[Executable, tuple[str, ...]]] = {
    "records of a fingerprint": (
        ledger_repo._BY_FINGERPRINT,
        ("sqlite_autoindex_ledger_1", "ix_ledger_tenant_fingerprint"),
    ),
    "executions of a workflow": (ledger_repo._FOR_WORKFLOW, ("ix_ledger_tenant_workflow",)),
    "leases in flight": (ops_repos._EXECUTING, ("ix_ledger_lease",)),
}
PG_INDEXES = {"sqlite_autoindex_ledger_1": "ledger_pkey"}


def _params(stmt: Executable) -> dict[str, Any]:
    text = str(stmt)
    return {k: v for k, v in PARAMS.items() if f":{k}" in text}


@pytest.fixture(scope="module")
def migrated(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("partial") / "plans.db"
    asyncio.run(SqliteStore.open(f"sqlite:///{path}", timedelta(hours=24)).close())
    return path


@pytest.mark.parametrize("name", sorted(LOOKUPS))
def test_a_lookup_seeks_its_partial_index_on_sqlite(migrated: Path, name: str) -> None:
    stmt, indexes = LOOKUPS[name]
    params = _params(stmt)
    plan = plan_of(stmt, params)
    conn = sqlite3.connect(migrated)
    try:
        rows = conn.execute("EXPLAIN QUERY PLAN " + plan.sql, plan.args(params))
        steps = [row[3] for row in rows]
    finally:
        conn.close()
    assert not [s for s in steps if s.startswith("SCAN")], steps
    for index in indexes:
        assert any(s.startswith("SEARCH") and f"INDEX {index} (" in s for s in steps), steps


def test_the_lookups_seek_their_partial_indexes_on_postgresql(postgres: PgServer) -> None:
    url = postgres.create_database("plans_partial_ledger", template=TEMPLATE)
    engine = create_engine(url.replace("+asyncpg", "+psycopg"), poolclass=NullPool)
    found: dict[str, list[str]] = {}
    try:
        with engine.connect() as conn:
            # A ledger of a few thousand records (of one tenant: the tenant alone
            # narrows nothing), and its statistics: on an empty table any index is
            # as good as another.
            conn.exec_driver_sql(
                "INSERT INTO ledger (tenant, key, fingerprint, state, body, created_us,"
                " expires_us, kind, workflow_id, lease_expires_us, created)"
                " SELECT 'acme', CASE WHEN mod(n, 10) = 0 THEN 'client:' || n"
                " ELSE 'idem_' || md5(n::text) END, 'idem_' || md5(n::text), 'succeeded', '',"
                " n, n, CASE WHEN mod(n, 50) = 0 THEN 'execution' ELSE 'hold' END,"
                " 'wf-' || n, CASE WHEN mod(n, 50) = 0 THEN n END, true"
                " FROM generate_series(1::bigint, 4000) AS n"
            )
            conn.exec_driver_sql("ANALYZE ledger")
            conn.exec_driver_sql("SET enable_seqscan = off")
            conn.exec_driver_sql("SET plan_cache_mode = force_generic_plan")
            for i, (name, (stmt, _)) in enumerate(sorted(LOOKUPS.items())):
                params = _params(stmt)
                plan = plan_of(stmt, params, ASYNCPG)
                bound = plan.bind(params)
                args = ", ".join(_literal(bound[n]) for n in plan.order)
                conn.exec_driver_sql(f"PREPARE lookup{i} AS {plan.sql}")
                rows = conn.exec_driver_sql(f"EXPLAIN EXECUTE lookup{i}({args})").all()
                found[name] = [row[0].strip() for row in rows]
    finally:
        engine.dispose()
    for name, (_, indexes) in LOOKUPS.items():
        steps = found[name]
        assert not [s for s in steps if "Seq Scan" in s], steps
        for index in indexes:
            assert any(PG_INDEXES.get(index, index) in s for s in steps), "\n".join(steps)


def _literal(value: Any) -> str:
    return str(value) if isinstance(value, int) else "'" + str(value).replace("'", "''") + "'"
