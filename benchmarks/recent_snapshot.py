"""A snapshot of the part of a large seeded store that a benchmark's calls can touch.

``slotward bench scale`` seeds up to a million holds with their ledger records
and audit chain before it starts its server, then claims free slots from
``free_from`` on. Reading the whole store into the history checker would take
longer than the claims (and gigabytes); what the calls can bear on is smaller
and exact:

- every hold created since the server started (the calls' own), and every hold
  ending after ``free_from``: the only ones a claim there could overlap (the
  seeded holds end by ``free_from``, benchmarks/seed_plan.py);
- every ledger record and audit entry written since the server started: the
  calls' records and their holds' audit entries.

The rows are filtered in SQL and decoded as :func:`slotward.testing.load_snapshot`
decodes them, in one transaction.
"""

from __future__ import annotations

from sqlalchemy import create_engine, or_, select
from sqlalchemy.pool import NullPool

from slotward.adapters.store import tables as t
from slotward.adapters.store.hold_repo import hold_from_row
from slotward.adapters.store.ledger_repo import record_from_row
from slotward.adapters.store.repos import audit_from_row
from slotward.testing import sync_url
from slotward.testing.recorded import Snapshot

__all__ = ["recent_snapshot"]


def recent_snapshot(url: str, since_us: int, window_from_us: int) -> Snapshot:
    """The holds created at or after ``since_us`` or ending after ``window_from_us``,
    and the ledger records and audit entries written at or after ``since_us``."""
    engine = create_engine(sync_url(url), poolclass=NullPool, isolation_level="SERIALIZABLE")
    h, ledger, audit = t.holds, t.ledger, t.audit_log
    try:
        with engine.begin() as conn:
            holds = conn.execute(
                select(h)
                .where(or_(h.c.created_us >= since_us, h.c.end_us > window_from_us))
                .order_by(h.c.id)
            ).all()
            records = conn.execute(
                select(ledger)
                .where(ledger.c.created_us >= since_us)
                .order_by(ledger.c.tenant, ledger.c.key)
            ).all()
            entries = conn.execute(
                select(audit).where(audit.c.at_us >= since_us).order_by(audit.c.tenant, audit.c.seq)
            ).all()
    finally:
        engine.dispose()
    return Snapshot(
        holds=tuple(hold_from_row(row._mapping) for row in holds),
        ledger=tuple(record_from_row(row._mapping) for row in records),
        audit=tuple(audit_from_row(row._mapping) for row in entries),
    )
