"""Read a whole store once, and check a history against it (``slotward.testing.history``).

Synchronous on purpose: tests and benchmarks call it after their servers are
done (or killed), outside any event loop. The async driver of a URL is swapped
for its sync sibling, so the URL the server was given works as is.
"""

from __future__ import annotations

from collections.abc import Sequence

from sqlalchemy import create_engine, select
from sqlalchemy.pool import NullPool

from slotward.adapters.store import tables as t
from slotward.adapters.store.hold_repo import hold_from_row
from slotward.adapters.store.ledger_repo import record_from_row
from slotward.adapters.store.repos import audit_from_row
from slotward.engine.clock import SystemClock
from slotward.testing.history import check
from slotward.testing.recorded import Call, Snapshot, Violation

__all__ = ["check_store", "load_snapshot", "sync_url"]

_SYNC_DRIVERS = {"+asyncpg": "+psycopg", "+aiosqlite": ""}


def sync_url(url: str) -> str:
    """The URL with its sync driver: ``+asyncpg`` -> ``+psycopg``, ``+aiosqlite`` -> none."""
    for driver, sync in _SYNC_DRIVERS.items():
        url = url.replace(driver, sync, 1)
    return url


def load_snapshot(url: str) -> Snapshot:
    """Every hold, ledger record and audit entry in the database at ``url``, in one transaction."""
    # SERIALIZABLE: the three reads see one state (PostgreSQL; SQLite always does)
    engine = create_engine(sync_url(url), poolclass=NullPool, isolation_level="SERIALIZABLE")
    try:
        with engine.begin() as conn:
            holds = conn.execute(select(t.holds).order_by(t.holds.c.id)).all()
            ledger = conn.execute(select(t.ledger).order_by(t.ledger.c.tenant, t.ledger.c.key))
            records = ledger.all()
            audit = conn.execute(
                select(t.audit_log).order_by(t.audit_log.c.tenant, t.audit_log.c.seq)
            ).all()
    finally:
        engine.dispose()
    return Snapshot(
        holds=tuple(hold_from_row(row._mapping) for row in holds),
        ledger=tuple(record_from_row(row._mapping) for row in records),
        audit=tuple(audit_from_row(r._mapping) for r in audit),
    )


def check_store(url: str, calls: Sequence[Call]) -> list[Violation]:
    """What the history checker finds wrong with ``calls`` against the database at ``url``.

    The store is read once (:func:`load_snapshot`), when every call is done;
    the instant just after the read is the snapshot's ``now``.
    """
    snapshot = load_snapshot(url)
    now = SystemClock().now()  # the snapshot's instant
    return check(calls, snapshot, now)
