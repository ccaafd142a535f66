"""The locks a PostgreSQL write transaction takes: its tenant, its attendees, the audit head.

All are transaction-scoped (released by COMMIT or ROLLBACK) and taken in one
order, so no two transactions wait for each other in a cycle:

1. the tenant's advisory lock: exclusive for a write that locks the whole
   tenant (``lock_tenant``), shared for one that names its attendees
   (``lock_attendees``). So a whole-tenant write waits for every attendee
   write of the tenant and they for it; attendee writes share it.
2. one exclusive advisory lock per attendee (and per ledger key), in sorted
   order, all in the statement that takes the shared tenant lock; or, for a
   write on a part of the tenant no attendee write touches (the relay's
   deliveries and subscriptions: ``lock_part``), that part's lock, after each
   tenant's shared lock, tenant by tenant in sorted order. Two writes
   on disjoint attendees run side by side; two sharing one run one after the
   other, and the second, under READ COMMITTED, sees all the first committed.
3. the tenant's audit head row (``SELECT ... FOR UPDATE``), taken by a
   create's claim lookup (in that statement) or else by the first audit
   append, so appends are one at a time per tenant and each extends the head
   the last one committed: the chain cannot fork. It is held from there to
   the commit, the last stretch of the transaction.

A write that, having decided, must change a hold with attendees it did not
lock (a loser it preempts, a stale hold it expires) asks for them again. Their
locks are only tried, never waited for (a wait there could close a cycle): if
one is taken, the transaction is rolled back and run again with those names
locked from the start, in order (:class:`LockOrderRetry`, caught by the store).
Whoever changes a hold holds the locks of all its attendees (or its tenant's,
exclusive): so a hold read under the lock of one of its attendees cannot have
changed by the time the others are locked.

Lock names are hashed to PostgreSQL's 64-bit advisory keys
(``hashtextextended``); a collision only makes two names share a lock.
"""

from __future__ import annotations

from collections.abc import Collection

from sqlalchemy import text

from slotward.adapters.store.runner import Runner

__all__ = ["LockOrderRetry", "TransactionLocks", "audit_lock_name"]

_SEP = "\x1f"  # in no tenant, attendee id or key: names of different kinds never meet

# Each name locked shared or exclusive as its flag says, in the order given:
# unnest yields the arrays' elements in order, one row at a time.
_IN_ORDER = text(
    "SELECT count(CASE WHEN u.shared"
    " THEN pg_advisory_xact_lock_shared(hashtextextended(u.x, 0))::text"
    " ELSE pg_advisory_xact_lock(hashtextextended(u.x, 0))::text END)"
    " FROM unnest(CAST(:names AS text[]), CAST(:shared AS boolean[])) AS u(x, shared)"
)
_TRY = text(
    "SELECT bool_and(pg_try_advisory_xact_lock(hashtextextended(x, 0))) AS ok"
    " FROM unnest(CAST(:names AS text[])) AS x"
)
_EXCLUSIVE = text("SELECT pg_advisory_xact_lock(hashtextextended(:tenant, 0))")


class LockOrderRetry(Exception):
    """Locks beyond the first were taken by another transaction: run again, taking
    them first. Not an error anyone sees: the store runs the transaction again."""


def _names(tenant: str, attendees: Collection[str], key: str | None) -> set[str]:
    names = {f"{tenant}{_SEP}a{_SEP}{a}" for a in attendees}
    if key is not None:
        names.add(f"{tenant}{_SEP}k{_SEP}{key}")
    return names


def audit_lock_name(tenant: str) -> str:
    """The advisory lock that orders a tenant's first audit appends (no head row yet)."""
    return f"{tenant}{_SEP}audit"


class TransactionLocks:
    """What one transaction has locked; ``wanted`` carries names over to its next attempt."""

    def __init__(self, db: Runner, wanted: set[str]) -> None:
        self._db = db
        self._wanted = wanted
        self._exclusive: set[str] = set()
        self._shared: set[str] = set()
        self._held: set[str] = set()

    def tenant(self, tenant: str) -> None:
        if tenant not in self._exclusive:
            self._db.first(_EXCLUSIVE, {"tenant": tenant})
            self._exclusive.add(tenant)

    def attendees(self, tenant: str, attendees: Collection[str], key: str | None) -> None:
        if tenant in self._exclusive:
            return  # no attendee write of the tenant runs beside this one
        names = _names(tenant, attendees, key)
        if tenant not in self._shared:
            prefix = tenant + _SEP
            first = sorted(names | {n for n in self._wanted if n.startswith(prefix)})
            shared = [True] + [False] * len(first)
            self._db.first(_IN_ORDER, {"names": [tenant, *first], "shared": shared})
            self._shared.add(tenant)
            self._held.update(first)
            return
        missing = sorted(names - self._held)
        if not missing:
            return
        row = self._db.first(_TRY, {"names": missing})
        if row is None or row["ok"] is not True:
            self._wanted.update(missing)
            raise LockOrderRetry(f"{len(missing)} more attendee lock(s) taken elsewhere")
        self._held.update(missing)

    def part(self, tenants: Collection[str], part: str) -> None:
        order = sorted(set(tenants) - self._exclusive - self._shared)
        if not order:
            return
        names = [n for t in order for n in (t, f"{t}{_SEP}p{_SEP}{part}")]
        self._db.first(_IN_ORDER, {"names": names, "shared": [True, False] * len(order)})
        self._shared.update(order)
