"""The tenants' audit chains over one synchronous SQLAlchemy Core connection.

Part of adapters/store/repos.py, which re-exports it. On PostgreSQL a writer's
appends are ordered per tenant at the chain's head (adapters/store/postgres/locks.py).
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import bindparam, insert, select, text, union, update

from slotward.adapters.store import tables as t
from slotward.adapters.store.instants import from_us, to_us
from slotward.adapters.store.postgres.locks import audit_lock_name
from slotward.adapters.store.runner import Row, Runner
from slotward.engine.model import AuditEntry
from slotward.engine.rules.audit import GENESIS

__all__ = ["HEAD_MOVE", "SqlAudit", "audit_from_row", "head_moved"]

_HEAD = select(t.audit_heads.c.seq, t.audit_heads.c.hash).where(
    t.audit_heads.c.tenant == bindparam("tenant")
)
_AUDIT_ADD = insert(t.audit_log)
_HEAD_ADD = insert(t.audit_heads)
HEAD_MOVE = (
    update(t.audit_heads)
    .where(t.audit_heads.c.tenant == bindparam("for_tenant"))
    .values(seq=bindparam("v_seq"), hash=bindparam("v_hash"))
)
# A writer's read of the head it is about to extend: locks the row until the
# commit, and, under READ COMMITTED, waits for a concurrent appender and then
# returns the head it committed (PostgreSQL re-reads a row it waited for).
_HEAD_TO_EXTEND = _HEAD.with_for_update()
_NAMED_LOCK = text("SELECT pg_advisory_xact_lock(hashtextextended(:name, 0))")


def audit_from_row(r: Row) -> AuditEntry:
    return AuditEntry(
        tenant=r["tenant"],
        seq=r["seq"],
        at=from_us(r["at_us"]),
        actor=r["actor"],
        action=r["action"],
        key=r["key"],
        hold_id=r["hold_id"],
        outcome=r["outcome"],
        prev_hash=r["prev_hash"],
        hash=r["hash"],
    )


class SqlAudit:
    """The tenant chains; ``lock_head``: a PostgreSQL writer's, whose appends are
    ordered per tenant at the head (adapters/store/postgres/locks.py)."""

    def __init__(self, db: Runner, *, lock_head: bool = False) -> None:
        self._db = db
        self._lock_head = lock_head
        # A PostgreSQL writer's head it holds locked (read FOR UPDATE, here or by
        # the claim's lookup: ``locked``) and has moved since, if it did: no
        # other transaction can move it before this one ends (``forget``).
        self._held: tuple[str, int, str] | None = None

    def forget(self) -> None:
        """The transaction ends: another may lock and move the head now."""
        self._held = None

    def locked(self, tenant: str, seq: int, hash_: str) -> None:
        """The head of ``tenant``, read FOR UPDATE in this transaction by another statement."""
        self._held = (tenant, seq, hash_)

    def head(self, tenant: str) -> tuple[int, str]:
        if not self._lock_head:
            row = self._db.first(_HEAD, {"tenant": tenant})
            return (0, GENESIS) if row is None else (row["seq"], row["hash"])
        held = self._held
        if held is not None and held[0] == tenant:
            return held[1], held[2]
        row = self._db.first(_HEAD_TO_EXTEND, {"tenant": tenant})
        if row is None:  # no row to lock yet: the tenant's first appenders queue here
            self._db.first(_NAMED_LOCK, {"name": audit_lock_name(tenant)})
            row = self._db.first(_HEAD_TO_EXTEND, {"tenant": tenant})
        seq, hash_ = (0, GENESIS) if row is None else (row["seq"], row["hash"])
        self._held = (tenant, seq, hash_)  # locked (or its first appenders' lock taken)
        return seq, hash_

    def append(self, entry: AuditEntry) -> None:
        self._add(entry)
        if entry.seq == 1:
            head = {"tenant": entry.tenant, "seq": 1, "hash": entry.hash}
            self._db.put(_HEAD_ADD, head)
        else:
            self._db.put(HEAD_MOVE, head_moved(entry.tenant, entry.seq, entry.hash))
        if self._held is not None and self._held[0] == entry.tenant:
            self._held = (entry.tenant, entry.seq, entry.hash)

    def _add(self, entry: AuditEntry) -> None:
        """The entry's row alone: its head row is the caller's to make or move."""
        self._db.put(
            _AUDIT_ADD,
            {
                "tenant": entry.tenant,
                "seq": entry.seq,
                "at_us": to_us(entry.at),
                "actor": entry.actor,
                "action": entry.action,
                "key": entry.key,
                "hold_id": entry.hold_id,
                "outcome": entry.outcome,
                "prev_hash": entry.prev_hash,
                "hash": entry.hash,
            },
        )

    def entries(self, tenant: str, after_seq: int, limit: int) -> list[AuditEntry]:
        a = t.audit_log
        q = (
            select(a)
            .where(a.c.tenant == tenant, a.c.seq > after_seq)
            .order_by(a.c.seq)
            .limit(limit)
        )
        return [audit_from_row(r) for r in self._db.dynamic(q)]

    def tenants(self) -> list[str]:
        # Rows as well as heads: a deleted head must not hide a chain from a check.
        q = union(select(t.audit_log.c.tenant), select(t.audit_heads.c.tenant))
        return sorted(r["tenant"] for r in self._db.dynamic(q))


def head_moved(tenant: str, seq: int, hash_: str) -> dict[str, Any]:
    """The parameters of ``HEAD_MOVE``: ``tenant``'s head row moved to ``seq``."""
    return {"for_tenant": tenant, "v_seq": seq, "v_hash": hash_}
