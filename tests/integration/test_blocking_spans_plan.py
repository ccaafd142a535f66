"""The spans a refusal reads (``hold_repo._SPANS``) start from the attendee index.

One statement joins each overlapping ``hold_attendees`` entry to its hold by
primary key. Only the index's side is constrained, so that is where the scan
must begin: started from ``holds`` (its status index, say, or a hash join over
the whole table) it would read every live hold of every tenant. A guardrail
on both stores, with statistics that make the wrong plan tempting.
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
PARAMS: dict[str, Any] = {
    "tenant": "acme", "attendees": ["att_1", "att_2"], "start": BASE, "lookback": BASE - 10**11,
    "end": BASE + 14 * 86_400 * 10**6,
}  # fmt: skip
_HOLDS = (
    "INSERT INTO holds (id, tenant, key, workflow_id, agent_id, attendees, start_us, end_us,"
    " title, description, priority, status, expires_us, token, intent_fp, created_us,"
    " updated_us, committed_us, preempted_by, audit_seq, event_seq)"
    " SELECT 'hold_' || n, 'acme', 'key_' || n, 'wf', 'agent', '[]',"
    " {base} + n * 600000000, {base} + n * 600000000 + 1800000000, 'Busy', NULL, 50,"
    " CASE WHEN n - n / 3 * 3 = 0 THEN 'committed' ELSE 'held' END, {base} + 10, 1, 'fp', 0, 0,"
    " NULL, NULL, n, 1 FROM {series}"
)
_ATTENDEES = (
    "INSERT INTO hold_attendees (hold_id, attendee, tenant, start_us, end_us, active)"
    " SELECT 'hold_' || n, 'att_' || (n - n / 40 * 40), 'acme', {base} + n * 600000000,"
    " {base} + n * 600000000 + 1800000000, {true} FROM {series}"
)


def _fill(execute: Any, series: str, true: str) -> None:
    execute(_HOLDS.format(base=BASE, series=series))
    execute(_ATTENDEES.format(base=BASE, series=series, true=true))


def test_the_spans_of_a_refusal_start_from_the_attendee_index_on_sqlite(tmp_path: Path) -> None:
    path = tmp_path / "spans.db"
    asyncio.run(SqliteStore.open(f"sqlite:///{path}", timedelta(hours=24)).close())
    conn = sqlite3.connect(path)
    try:
        series = "(WITH RECURSIVE s(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM s WHERE n < 4000)"
        _fill(conn.execute, series + " SELECT n FROM s)", "1")
        conn.execute("ANALYZE")
        plan = plan_of(hold_repo._SPANS, PARAMS)
        steps = [r[3] for r in conn.execute("EXPLAIN QUERY PLAN " + plan.sql, plan.args(PARAMS))]
    finally:
        conn.close()
    assert not [s for s in steps if s.startswith("SCAN")], steps
    assert steps[0].startswith("SEARCH hold_attendees USING COVERING INDEX "
                               "ix_hold_attendees_overlap ("), steps  # fmt: skip
    assert steps[1] == "SEARCH holds USING INDEX sqlite_autoindex_holds_1 (id=?)", steps


def test_the_spans_of_a_refusal_start_from_the_attendee_index_on_postgresql(
    postgres: PgServer,
) -> None:
    url = postgres.create_database("plans_blocking_spans", template=TEMPLATE)
    engine = create_engine(url.replace("+asyncpg", "+psycopg"), poolclass=NullPool)
    plan = plan_of(hold_repo._SPANS, PARAMS, ASYNCPG)
    bound = plan.bind(PARAMS)
    args = ", ".join(_literal(bound[name]) for name in plan.order)
    try:
        with engine.connect() as conn:
            _fill(conn.exec_driver_sql, "generate_series(1::bigint, 4000) AS n", "true")
            conn.exec_driver_sql("ANALYZE holds")
            conn.exec_driver_sql("ANALYZE hold_attendees")
            conn.exec_driver_sql("SET enable_seqscan = off")  # a few thousand rows: cheapest
            conn.exec_driver_sql(f"PREPARE spans AS {plan.sql}")
            found = conn.exec_driver_sql(f"EXPLAIN EXECUTE spans({args})").all()
    finally:
        engine.dispose()
    steps = [row[0].strip() for row in found]
    assert steps[0].startswith("Nested Loop"), steps
    assert "on hold_attendees" in steps[1], steps  # the outer side: an index scan or a bitmap one
    [inner] = [i for i, s in enumerate(steps) if "holds_pkey" in s]
    assert any("ix_hold_attendees_overlap" in s for s in steps[1:inner]), steps
    assert "hold_attendees.hold_id" in steps[inner + 1], steps  # looked up per entry
    assert not [s for s in steps if "Seq Scan" in s or "Hash" in s], steps


def _literal(value: Any) -> str:
    return str(value) if isinstance(value, int) else "'" + str(value).replace("'", "''") + "'"
