"""A snapshot of the part of a large seeded store that a benchmark's calls can touch.

``slotward bench scale`` seeds up to a million holds with their ledger records
and audit chain before it starts its server, then claims free slots from
``free_from`` on. Reading the whole store into the history checker took 38 s
at a million holds (longer than the claims, and gigabytes); what the calls can
bear on is small, and read through primary keys only:

- :func:`mark`, read before the server starts: the first hold id it can make
  (ids sort by creation time, ``TimeOrderedIds``) and each tenant's audit head;
- the holds with an id from the mark on: every hold the server made, and no
  seeded one (the seed's ids are as time-ordered, all from before the mark).
  No seeded hold can overlap a claim (they all end by ``free_from``,
  benchmarks/seed_plan.py), so leaving them out hides no double booking;
- the audit entries after each tenant's head, of those holds (a seeded held
  hold expiring meanwhile logs an entry whose hold is not in this snapshot);
- the ledger records of those holds' keys and of the keys the calls were
  answered under: every record the checker looks up.

Rows are decoded as :func:`slotward.testing.load_snapshot` decodes them, in
one transaction.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from sqlalchemy import Connection, and_, create_engine, select
from sqlalchemy.pool import NullPool

from slotward.adapters.store import tables as t
from slotward.adapters.store.hold_repo import hold_from_row
from slotward.adapters.store.ledger_repo import record_from_row
from slotward.adapters.store.repos import audit_from_row
from slotward.engine.model import AuditEntry, LedgerRecord
from slotward.engine.usecases.executions import stored_key
from slotward.testing import Call, sync_url
from slotward.testing.recorded import Snapshot

__all__ = ["Mark", "mark", "recent_snapshot"]

_CHUNK = 500  # keys per IN (...): well under SQLite's bound on parameters


@dataclass(frozen=True)
class Mark:
    """Where a store stood before a server started on it."""

    first_hold_id: str  # every hold made later has an id at least this
    heads: Mapping[str, int]  # tenant -> its last audit seq


def mark(url: str, at_us: int) -> Mark:
    """The store at ``url`` as it is now, ``at_us`` being now (or a moment before)."""
    engine = create_engine(sync_url(url), poolclass=NullPool)
    try:
        with engine.connect() as conn:
            heads = conn.execute(select(t.audit_heads.c.tenant, t.audit_heads.c.seq)).all()
    finally:
        engine.dispose()
    return Mark(f"hold_{at_us // 1000:012x}", {str(tenant): int(seq) for tenant, seq in heads})


def recent_snapshot(url: str, since: Mark, calls: Sequence[Call]) -> Snapshot:
    """The holds made after ``since``, their audit entries, and the ledger records the
    checker looks up for them and for ``calls``."""
    h = t.holds
    engine = create_engine(sync_url(url), poolclass=NullPool, isolation_level="SERIALIZABLE")
    try:
        with engine.begin() as conn:
            rows = conn.execute(select(h).where(h.c.id >= since.first_hold_id).order_by(h.c.id))
            holds = tuple(hold_from_row(row._mapping) for row in rows)
            made = {(x.tenant, x.id) for x in holds}
            tenants = {x.tenant for x in holds} | {c.tenant for c in calls}
            audit = [e for e in _entries(conn, tenants, since) if (e.tenant, e.hold_id) in made]
            keys = {(x.tenant, x.key) for x in holds} | {
                (c.tenant, key) for c in calls if (key := stored_key(c.key or "")) is not None
            }
            ledger = _records(conn, keys)
    finally:
        engine.dispose()
    return Snapshot(holds=holds, ledger=ledger, audit=tuple(audit))


def _entries(conn: Connection, tenants: Iterable[str], since: Mark) -> list[AuditEntry]:
    a = t.audit_log
    out: list[AuditEntry] = []
    for tenant in sorted(tenants):
        after = and_(a.c.tenant == tenant, a.c.seq > since.heads.get(tenant, 0))
        rows = conn.execute(select(a).where(after).order_by(a.c.seq))
        out += [audit_from_row(row._mapping) for row in rows]
    return out


def _records(conn: Connection, keys: set[tuple[str, str]]) -> tuple[LedgerRecord, ...]:
    ledger = t.ledger
    by_tenant: dict[str, list[str]] = {}
    for tenant, key in sorted(keys):
        by_tenant.setdefault(tenant, []).append(key)
    out: list[LedgerRecord] = []
    for tenant, names in by_tenant.items():
        for start in range(0, len(names), _CHUNK):
            chosen = names[start : start + _CHUNK]
            where = and_(ledger.c.tenant == tenant, ledger.c.key.in_(chosen))
            out += [record_from_row(r._mapping) for r in conn.execute(select(ledger).where(where))]
    return tuple(sorted(out, key=lambda r: (r.tenant, r.key)))
