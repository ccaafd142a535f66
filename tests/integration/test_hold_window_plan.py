"""The dashboard's window of holds (``hold_repo._WINDOW``) seeks its index, in its order.

``ix_holds_tenant_start_id`` is (tenant, start_us, id): the statement's range
on the start is the index's, and so is its order (start then id), so a page
of the window ends the scan after ``limit`` rows. Read from the tenant's
other index (by id), or sorted after a scan, it would read every hold of the
tenant whatever the window (SQLite did so before migration 0009). A guardrail
on both stores, with statistics that make the tenant's other index tempting
(one tenant holds nine rows in ten).
"""

from __future__ import annotations

import asyncio
import sqlite3
from datetime import timedelta
from pathlib import Path
from typing import Any

from sqlalchemy import create_engine
from sqlalchemy.pool import NullPool

from slotward.adapters.store import hold_repo
from slotward.adapters.store.plans import ASYNCPG, plan_of
from slotward.adapters.store.sqlite.store import SqliteStore
from tests.conftest import TEMPLATE
from tests.pgserver import PgServer

BASE = 1_000_000_000_000_000
START = BASE + 2000 * 600_000_000  # amid the rows: a day's window
PARAMS: dict[str, Any] = {
    "tenant": "acme", "start": START, "end": START + 86_400 * 10**6,
    "earliest": START - 86_400 * 10**6, "limit": 500,
}  # fmt: skip
# A hold every 10 minutes, 30 minutes long, nine in ten of them acme's.
_HOLDS = (
    "INSERT INTO holds (id, tenant, key, workflow_id, agent_id, attendees, start_us, end_us,"
    " title, description, priority, status, expires_us, token, intent_fp, created_us,"
    " updated_us, committed_us, preempted_by, audit_seq, event_seq)"
    " SELECT 'hold_' || n, CASE WHEN n - n / 10 * 10 = 0 THEN 'other' ELSE 'acme' END,"
    " 'key_' || n, 'wf', 'agent', '[]', {base} + n * 600000000,"
    " {base} + n * 600000000 + 1800000000, 'Busy', NULL, 50, 'committed', {base} + 10, 1, 'fp',"
    " 0, 0, NULL, NULL, n, 1 FROM {series}"
)
INDEX = "ix_holds_tenant_start_id"


def test_the_window_seeks_its_index_in_its_order_on_sqlite(tmp_path: Path) -> None:
    path = tmp_path / "window.db"
    asyncio.run(SqliteStore.open(f"sqlite:///{path}", timedelta(hours=24)).close())
    conn = sqlite3.connect(path)
    try:
        series = "(WITH RECURSIVE s(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM s WHERE n < 4000)"
        conn.execute(_HOLDS.format(base=BASE, series=series + " SELECT n FROM s)"))
        conn.execute("ANALYZE")
        plan = plan_of(hold_repo._WINDOW, PARAMS)
        steps = [r[3] for r in conn.execute("EXPLAIN QUERY PLAN " + plan.sql, plan.args(PARAMS))]
    finally:
        conn.close()
    # One step: no scan, and no temporary b-tree sorting what the index gave.
    assert steps == [f"SEARCH holds USING INDEX {INDEX} (tenant=? AND start_us>? AND start_us<?)"]


def test_the_window_seeks_its_index_on_postgresql(postgres: PgServer) -> None:
    url = postgres.create_database("plans_hold_window", template=TEMPLATE)
    engine = create_engine(url.replace("+asyncpg", "+psycopg"), poolclass=NullPool)
    plan = plan_of(hold_repo._WINDOW, PARAMS, ASYNCPG)

    def explain(conn: Any, limit: int) -> list[str]:
        bound = plan.bind(PARAMS | {"limit": limit})
        args = ", ".join(_literal(bound[name]) for name in plan.order)
        found = conn.exec_driver_sql(f"EXPLAIN EXECUTE window_of({args})").all()
        return [row[0].strip() for row in found]

    try:
        with engine.connect() as conn:
            series = "generate_series(1::bigint, 4000) AS n"
            conn.exec_driver_sql(_HOLDS.format(base=BASE, series=series))
            conn.exec_driver_sql("ANALYZE holds")
            conn.exec_driver_sql("SET enable_seqscan = off")  # a few thousand rows: cheapest
            conn.exec_driver_sql(f"PREPARE window_of AS {plan.sql}")
            # A page of the window: read in the index's order, the limit ends it.
            page = explain(conn, 20)
            # More than the window holds: the window's range of the index, then sorted.
            whole = explain(conn, 5000)
    finally:
        engine.dispose()
    assert page[0].startswith("Limit"), page
    assert page[1].startswith(f"->  Index Scan using {INDEX} on holds"), page
    assert not [s for s in page if "Sort" in s], page
    for steps in (page, whole):
        [at] = [i for i, s in enumerate(steps) if f"Index Scan using {INDEX}" in s
                or f"Bitmap Index Scan on {INDEX}" in s]  # fmt: skip
        cond = steps[at + 1]
        assert cond.startswith("Index Cond:"), steps
        assert "start_us >=" in cond, steps  # the window's range
        assert "start_us <" in cond, steps
        assert not [s for s in steps if "Seq Scan" in s or "ix_holds_tenant_id" in s], steps


def _literal(value: Any) -> str:
    return str(value) if isinstance(value, int) else "'" + str(value).replace("'", "''") + "'"
